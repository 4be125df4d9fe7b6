"""The Engine API client: DOCKER_HOST parsing and talking over a unix socket."""

from __future__ import annotations

import pytest

from nvdocker2.engines.docker.service.api import (
    EngineClient,
    EngineError,
    EngineUnavailable,
    parse_docker_host,
)
from nvdocker2.errors import BadInput


def test_docker_host_defaults_to_the_rootful_socket():
    assert parse_docker_host(None, {}).socket_path == "/var/run/docker.sock"


def test_docker_host_flag_wins_over_the_environment():
    host = parse_docker_host("unix:///run/a.sock", {"DOCKER_HOST": "unix:///run/b.sock"})
    assert host.socket_path == "/run/a.sock"


def test_docker_host_comes_from_the_environment_when_no_flag():
    assert (
        parse_docker_host(None, {"DOCKER_HOST": "unix:///run/b.sock"}).socket_path == "/run/b.sock"
    )


def test_plain_tcp_docker_host_is_used():
    host = parse_docker_host("tcp://127.0.0.1:2375", {})
    assert (host.tcp_host, host.tcp_port, host.socket_path) == ("127.0.0.1", 2375, None)


@pytest.mark.parametrize(
    "url, env, words",
    [
        ("ssh://me@gpu-host", {}, "only unix:// and tcp://"),
        ("npipe:////./pipe/docker_engine", {}, "only unix:// and tcp://"),
        ("unix://docker.sock", {}, "must be absolute"),
        ("tcp://10.0.0.1:2376", {}, "TLS"),
        ("tcp://10.0.0.1:2375", {"DOCKER_TLS_VERIFY": "1"}, "TLS"),
    ],
)
def test_docker_hosts_we_cannot_speak_are_refused_with_a_hint(url, env, words):
    with pytest.raises(BadInput) as err:
        parse_docker_host(url, env)
    assert words in err.value.message
    assert "unix:///var/run/docker.sock" in err.value.hint


def test_info_ping_and_containers_come_from_the_socket(engine):
    engine.containers = [{"Id": "abc", "State": "running"}]
    client = EngineClient(parse_docker_host(engine.host, {}))
    assert client.ping() is True
    assert client.info()["DefaultRuntime"] == "runc"
    assert client.running_containers() == [{"Id": "abc", "State": "running"}]
    assert engine.requests == ["/_ping", "/info", "/containers/json"]


def test_a_missing_socket_is_unavailable_and_names_the_path(tmp_path):
    client = EngineClient(parse_docker_host(f"unix://{tmp_path}/none.sock", {}))
    with pytest.raises(EngineUnavailable, match="none.sock does not exist"):
        client.info()


def test_a_socket_nobody_listens_on_is_refused(tmp_path):
    import socket

    path = tmp_path / "dead.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.close()
    with pytest.raises(EngineUnavailable, match="connection refused"):
        EngineClient(parse_docker_host(f"unix://{path}", {})).ping()


def test_a_slow_dockerd_times_out_as_unavailable(engine):
    engine.delay = 1.0
    client = EngineClient(parse_docker_host(engine.host, {}), timeout=0.2)
    with pytest.raises(EngineUnavailable, match="no answer"):
        client.info()


def test_an_http_error_is_an_engine_error_with_the_status(engine):
    engine.responder = lambda path, n: (500, b'{"message": "boom"}')
    with pytest.raises(EngineError, match="HTTP 500"):
        EngineClient(parse_docker_host(engine.host, {})).info()


def test_a_reply_that_is_not_json_is_unavailable(engine):
    engine.responder = lambda path, n: (200, b"<html>")
    with pytest.raises(EngineUnavailable, match="not JSON"):
        EngineClient(parse_docker_host(engine.host, {})).info()
