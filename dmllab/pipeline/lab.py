"""JupyterLab on the generated notebooks without dirtying the checkout: ``make lab``
(``python -m dmllab.pipeline.lab``; :class:`GeneratedNotebooks`, docs/guide/study.md).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

from dmllab import paths


def saved_copy(stem: str) -> Path:
    """Where Lab's save of ``notebooks/<stem>.ipynb`` goes (:func:`~dmllab.pipeline.template.lab_copy`)."""
    from dmllab.pipeline.template import lab_copy

    return paths.results_dir() / lab_copy(stem)


@functools.cache
def kernel_metadata(name: str) -> dict[str, Any]:
    """The metadata Lab writes when the kernel ``name`` starts (its ``kernelspec``, this ipykernel's
    ``language_info``); nothing for a kernel that is not installed."""
    from ipykernel.ipkernel import IPythonKernel
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        spec = KernelSpecManager().get_kernel_spec(name)
    except NoSuchKernel:
        return {}
    return {
        "kernelspec": {"name": name, "display_name": spec.display_name, "language": spec.language},
        "language_info": dict(IPythonKernel.language_info),
    }


class GeneratedNotebooks(AsyncLargeFileManager):
    """Jupyter's file contents manager, except that a generated notebook (``notebooks/*.ipynb``) opens with the
    :func:`kernel_metadata` of its kernel (opening changes nothing) and saves to :func:`saved_copy`."""

    def _generated(self, path: str) -> str | None:
        """The stem of the generated notebook at the API path ``path``, None for any other file."""
        os_path = Path(self._get_os_path(path.strip("/")))
        notebooks = paths.repo_root() / "notebooks"
        if os_path.suffix == ".ipynb" and os_path.parent.resolve() == notebooks and os_path.is_file():
            return os_path.stem
        return None

    async def get(self, path, content=True, type=None, format=None, **kwargs):
        model = await super().get(path, content=content, type=type, format=format, **kwargs)
        if model["type"] == "notebook" and model.get("content") and self._generated(path):
            meta = model["content"]["metadata"]
            meta.update(kernel_metadata(meta.get("kernelspec", {}).get("name", "")))
        return model

    async def save(self, model, path=""):
        stem = self._generated(path)
        if stem is None or model.get("type") != "notebook" or "content" not in model or model.get("chunk"):
            return await super().save(model, path)
        import nbformat

        from dmllab.fileio import write_text_atomic

        copy = saved_copy(stem)
        copy.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(copy, nbformat.writes(nbformat.from_dict(model["content"])) + "\n")
        self.log.info(
            "dmllab: %s is generated, so it stays as it is; the notebook as you have it, outputs included, is "
            "saved to %s",
            path.strip("/"),
            copy,
        )
        return await self.get(path, content=False)


def lab_arguments() -> list[str]:
    """:func:`main`'s JupyterLab options: this contents manager, rooted at the checkout, opened at ``notebooks/``,
    root allowed (CI and containers run as root)."""
    manager = f"{GeneratedNotebooks.__module__}.{GeneratedNotebooks.__qualname__}"
    return [
        f"--ServerApp.contents_manager_class={manager}",
        f"--ServerApp.root_dir={paths.repo_root()}",
        "--LabApp.default_url=/lab/tree/notebooks",
        "--ServerApp.allow_root=True",
    ]


def main(argv: Sequence[str] | None = None) -> None:
    """JupyterLab with :func:`lab_arguments`, then ``argv`` (JupyterLab's own options, e.g. ``--port 8889``)."""
    from jupyterlab.labapp import LabApp

    LabApp.launch_instance(argv=[*lab_arguments(), *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()
