"""What `worker` and `dev` check before they start anything, so a bad setting is one line, not a traceback."""

from __future__ import annotations

from .logs import library_level
from .settings import Settings, SettingsError


def preflight(settings: Settings) -> None:
    """Raise SettingsError naming the variable for a setting that would only fail later."""
    library_level(settings.library_log_level)
    data_dir = settings.data_dir
    if data_dir.exists() and not data_dir.is_dir():
        raise SettingsError(f"DISPATCHER_DATA_DIR={str(data_dir)!r}: not a directory")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = f"cannot create it ({exc.strerror})"
        raise SettingsError(f"DISPATCHER_DATA_DIR={str(data_dir)!r}: {why}") from exc
