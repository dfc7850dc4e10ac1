"""The loss registry :data:`LOSSES`, in a module of its own so that every loss module registers its losses where
they are defined (``@LOSSES.register("proxynca")`` on the class)."""

from __future__ import annotations

from ..registry import Registry

#: Every loss by name. A leaf's constructor takes ``(num_classes, embedding_dim, **kwargs)``; a wrapper's
#: (``wraps = True``: Proxy Synthesis, the mixups) takes the built loss it wraps as ``base``.
LOSSES: Registry = Registry("loss", supplied=("num_classes", "embedding_dim", "base", "generator"))
