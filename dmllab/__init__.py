__version__ = "0.1.0"

# Before torch runs its first CPU kernel: the same float32 bits on every x86-64 CPU (dmllab.numerics).
from dmllab.numerics import pin_cpu_isa as _pin_cpu_isa

_pin_cpu_isa()
