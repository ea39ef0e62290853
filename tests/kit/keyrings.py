"""Kernel keyring calls for the sandbox's attack tests, by number: no keyutils library is needed."""

from __future__ import annotations

import ctypes
import platform

# asm/unistd.h: add_key and keyctl on the machines the kit grades on.
ADD_KEY, KEYCTL = {"x86_64": (248, 250), "aarch64": (217, 219)}[platform.machine()]
KEYCTL_GET_KEYRING_ID, KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_SEARCH = 0, 1, 10
SESSION_KEYRING, USER_KEYRING, USER_SESSION_KEYRING = -3, -4, -5
# For attack payloads, which use these through str.format.
NAMES = {
    "add_key": ADD_KEY,
    "keyctl": KEYCTL,
    "search": KEYCTL_SEARCH,
    "session": SESSION_KEYRING,
    "user": USER_KEYRING,
    "user_session": USER_SESSION_KEYRING,
}
_libc = ctypes.CDLL(None, use_errno=True)


def _checked(result: int) -> int:
    """The call's result, or OSError with its errno."""
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"keyring call failed: {errno}")
    return result


def join_new_session_keyring() -> int:
    """Give this process an anonymous session keyring of its own (what its children inherit)."""
    return _checked(_libc.syscall(KEYCTL, KEYCTL_JOIN_SESSION_KEYRING, None))


def add_user_key(description: str, payload: str, keyring: int) -> int:
    """Add a `user` key to `keyring`; its serial number."""
    data = payload.encode()
    return _checked(
        _libc.syscall(ADD_KEY, b"user", description.encode(), data, len(data), ctypes.c_long(keyring))
    )
