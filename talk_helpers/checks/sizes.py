"""Sizes in bytes, as the production checks show them (KiB, MiB or GiB with one decimal),
and the page a kernel allocates shared memory in."""

PAGE_BYTES = 4096  # tmpfs (/dev/shm) hands out whole pages
MIB = 2**20


def size_text(n_bytes: float) -> str:
    """``n_bytes`` with one decimal in the largest unit below it, e.g. ``'18.4 MiB'``."""
    for unit, scale in (("GiB", 2**30), ("MiB", MIB), ("KiB", 2**10)):
        if abs(n_bytes) >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{int(n_bytes)} bytes"


def page_rounded(n_bytes: int) -> int:
    """``n_bytes`` rounded up to whole pages: what one shared-memory file really takes."""
    return -(-int(n_bytes) // PAGE_BYTES) * PAGE_BYTES
