"""A port or host that cannot be listened on is one line naming the setting, and the right exit code."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from dispatcher.ports import EXIT_CONFIG, EXIT_PORT_IN_USE, CannotListen, check_port_free
from dispatcher.preflight import preflight
from dispatcher.settings import Settings, SettingsError


def test_a_taken_port_names_the_setting_and_exits_3() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(CannotListen) as info:
            check_port_free("127.0.0.1", port, "DISPATCHER_WEB_PORT")
    assert info.value.exit_code == EXIT_PORT_IN_USE
    assert str(info.value) == (f"127.0.0.1:{port} is already in use; set DISPATCHER_WEB_PORT to a free port"
                               " (or stop whatever listens there)")


@pytest.mark.parametrize(("host", "port", "named"), [
    ("127.0.0.1", 70000, "DISPATCHER_WEB_PORT=70000"),
    ("127.0.0.1", -1, "DISPATCHER_WEB_PORT=-1"),
    ("127.0.0.1", 0, "DISPATCHER_WEB_PORT=0"),  # the worker's web port must be a real one
    ("192.0.2.1", 18080, "check DISPATCHER_WEB_HOST"),  # an address this machine does not have
])
def test_a_bad_port_or_host_is_a_configuration_error(host: str, port: int, named: str) -> None:
    with pytest.raises(CannotListen) as info:
        check_port_free(host, port, "DISPATCHER_WEB_PORT", "DISPATCHER_WEB_HOST", any_port=False)
    assert info.value.exit_code == EXIT_CONFIG
    assert named in str(info.value)


def test_port_zero_is_any_port_where_allowed() -> None:
    check_port_free("127.0.0.1", 0, "DISPATCHER_DEV_BROKER_PORT")
    check_port_free("::1", 0, "--port")


def test_a_data_dir_that_is_a_file_or_a_bad_library_level_is_refused_up_front(tmp_path: Path) -> None:
    afile = tmp_path / "data"
    afile.write_text("not a directory")
    with pytest.raises(SettingsError, match=r"DISPATCHER_DATA_DIR=.*not a directory"):
        preflight(Settings(data_dir=afile))
    with pytest.raises(SettingsError, match="DISPATCHER_LIBRARY_LOG_LEVEL='loud'"):
        preflight(Settings(data_dir=tmp_path / "d", library_log_level="loud"))
    preflight(Settings(data_dir=tmp_path / "d"))
    assert (tmp_path / "d").is_dir()
