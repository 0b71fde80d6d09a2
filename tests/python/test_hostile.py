# Hostile input from Python and a daemon that goes away: every case is a clear
# Python exception (the right kvtier.Error subclass with the daemon's message,
# or ValueError/TypeError naming the argument), never a crash, a hang past the
# timeout, or wrong bytes in the caller's buffer.
import os
import signal
import threading

import numpy as np
import pytest

import kvtier

LAYOUT = kvtier.Layout(layers=2, kv_heads=2, head_dim=64, tokens_per_page=64)
PB = LAYOUT.page_bytes
KEYS = kvtier.page_keys(LAYOUT, list(range(3 * 64)))


@pytest.fixture
def client(kvtierd):
    with kvtier.Client(kvtierd.endpoint, layout=LAYOUT, timeout_ms=3000) as c:
        yield c


@pytest.fixture
def arena(client):
    buf = kvtier.ShmBuffer(4 * PB)
    return client.register(buf), np.frombuffer(buf, dtype=np.uint8).reshape(4, PB)


def test_keys_of_the_wrong_length_or_type(client):
    with pytest.raises(ValueError, match=r"keys\[1\] must be 16 bytes, got 15"):
        client.lookup([KEYS[0], KEYS[1][:15]])
    with pytest.raises(ValueError, match="multiple of 16"):
        client.lookup(KEYS[0] + b"x")
    with pytest.raises(TypeError, match=r"keys\[0\] must be 16 bytes, got int"):
        client.lookup([1, 2])
    with pytest.raises(TypeError, match="sequence of 16-byte"):
        client.lookup("00" * 16)
    with pytest.raises(TypeError, match="sequence of 16-byte"):
        client.delete(42)
    with pytest.raises(ValueError, match="parent must be 16 bytes"):
        client.put_inline(KEYS[:1], [bytes(PB)], parent=b"\0" * 8)
    with pytest.raises(kvtier.InvalidArgument, match="LOOKUP: no keys"):
        client.lookup([])  # the daemon's own refusal, with its message


def test_offsets_and_buffers_out_of_range(client, arena):
    bid, view = arena
    view[:] = 0x5A
    with pytest.raises(ValueError, match="got 1 offsets for 2 keys"):
        client.get(KEYS[:2], bid, [0])
    with pytest.raises(ValueError, match=r"offsets\[0\] = -1 is negative"):
        client.get(KEYS[:1], bid, [-1])
    with pytest.raises(TypeError, match=r"offsets\[0\] must be an int"):
        client.get(KEYS[:1], bid, [1.0])
    with pytest.raises(ValueError, match=r"offsets\[0\] is out of range"):
        client.get(KEYS[:1], bid, [1 << 70])
    client.put(KEYS[:1], bid, [0])
    # A page that would run past the buffer's end: refused by the daemon, nothing written.
    with pytest.raises(kvtier.OutOfRange, match="lies outside buffer"):
        client.get(KEYS[:1], bid, [4 * PB - 10])
    with pytest.raises(kvtier.OutOfRange, match="lies outside buffer"):
        client.put(KEYS[1:2], bid, [3 * PB + 1])
    assert (view == 0x5A).all()
    with pytest.raises(kvtier.NotFound, match="buffer 999 is not registered"):
        client.get(KEYS[:1], 999, [0])
    with pytest.raises(ValueError, match="buffer_id -1 is not a registered buffer id"):
        client.get(KEYS[:1], -1, [0])


def test_wrong_sizes_and_strings(client):
    with pytest.raises(ValueError, match=r"pages\[1\] is 10 bytes; the session's page is 65536"):
        client.put_inline(KEYS[:2], [bytes(PB), bytes(10)])
    with pytest.raises(ValueError, match="got 1 pages for 2 keys"):
        client.put_inline(KEYS[:2], [bytes(PB)])
    with pytest.raises(TypeError, match=r"pages\[0\] is not bytes-like"):
        client.put_inline(KEYS[:1], ["text"])
    with pytest.raises(ValueError, match="policy must be 'wait', 'best_effort' or 'timeout'"):
        client.get(KEYS[:1], 1, [0], policy="eventually")
    with pytest.raises(ValueError, match="target must be 'hbm', 'host', 'nvme' or 'remote'"):
        client.prefetch(KEYS, target="disk")
    with pytest.raises(ValueError, match="tier must be"):
        client.evict(tier="ssd")
    with pytest.raises(ValueError, match="timeout_ms"):
        kvtier.Client(client.endpoint, timeout_ms=-1)
    with pytest.raises(TypeError, match="kvtier.Layout"):
        kvtier.Client(client.endpoint, layout=(2, 2, 64))
    with pytest.raises(TypeError, match="get_layers: buf must be the kvtier.ShmBuffer"):
        client.get_layers(KEYS[:1], 1, [0], bytearray(PB), 0)


def test_get_layers_bad_progress_slot_or_buffer(client):
    buf = kvtier.ShmBuffer(4 * PB + 64)
    bid = client.register(buf)
    client.put_inline(KEYS[:1], [bytes(PB)])
    with pytest.raises(kvtier.OutOfRange, match="progress_offset .* lies outside"):
        client.get_layers(KEYS[:1], bid, [0], buf, 4 * PB + 64)
    with pytest.raises(kvtier.InvalidArgument, match="multiple of 8"):
        client.get_layers(KEYS[:1], bid, [0], buf, 4 * PB + 3)
    with pytest.raises(ValueError, match=f"not the kvtier.ShmBuffer registered as buffer {bid}"):
        client.get_layers(KEYS[:1], bid, [0], kvtier.ShmBuffer(4 * PB + 64), 4 * PB)
    with pytest.raises(TypeError, match="on_layer must be callable"):
        client.get_layers(KEYS[:1], bid, [0], buf, 4 * PB, on_layer=5)


def test_no_layout_and_another_sessions_buffer(kvtierd, arena):
    bid, _ = arena
    with kvtier.Client(kvtierd.endpoint) as bare:
        with pytest.raises(kvtier.FailedPrecondition, match="declared no layout"):
            bare.get(KEYS[:1], bid, [0])
        with pytest.raises(kvtier.NotFound, match=f"buffer {bid} is not registered"):
            bare.unregister(bid)


def test_authentication_and_permission_errors(kvtierd_factory):
    tenants = {"tenants": [{"name": "team-a", "token": "secret-aaaa"},
                           {"name": "ops", "token": "secret-ops1", "admin": True}]}
    d = kvtierd_factory(tenants=tenants, probe_tenant="team-a", probe_token="secret-aaaa")
    for tenant, token in [("nobody", ""), ("team-a", "wrong-token")]:
        with pytest.raises(kvtier.Unauthenticated, match="unknown tenant or bad token") as e:
            kvtier.Client(d.endpoint, tenant=tenant, token=token)
        assert e.value.code == "UNAUTHENTICATED" and "kvtierd:" in e.value.message
    with kvtier.Client(d.endpoint, tenant="team-a", token="secret-aaaa") as c:
        assert c.namespace == "team-a"
        with pytest.raises(kvtier.PermissionDenied, match="'team-a' is not an admin"):
            c.flush()
        with pytest.raises(kvtier.PermissionDenied, match="may evict only its own namespace"):
            c.evict("ops")
        assert isinstance(pytest.raises(kvtier.Error, c.tenants).value, kvtier.PermissionDenied)


def test_no_daemon_is_unavailable_within_the_timeout(tmp_path):
    with pytest.raises(kvtier.Unavailable, match="no reply from kvtierd .* within 300 ms"):
        kvtier.Client(f"ipc://{tmp_path}/nobody.sock", timeout_ms=300)


def test_daemon_killed_mid_session(kvtierd, arena, client):
    bid, view = arena
    view[0] = 1
    client.put(KEYS[:1], bid, [0])
    view[1] = 0x33
    kvtierd.kill()
    with pytest.raises(kvtier.Unavailable, match="within 3000 ms"):
        client.get(KEYS[:1], bid, [PB])
    assert (view[1] == 0x33).all()  # no partial page written
    with pytest.raises(kvtier.Unavailable):
        client.lookup(KEYS)
    with pytest.raises(kvtier.Unavailable):
        client.lookup_async(KEYS).result(timeout=30)
    # A new daemon on the same socket does not know the old session.
    kvtierd.start()
    with pytest.raises(kvtier.Error) as e:
        client.lookup(KEYS)
    assert not isinstance(e.value, kvtier.Unavailable)
    with kvtier.Client(kvtierd.endpoint, layout=LAYOUT) as fresh:
        assert fresh.lookup(KEYS).hits == 0  # host tier only: nothing survived


def test_daemon_killed_during_a_call_in_another_thread(kvtierd, client):
    """A call blocked on a stopped daemon that is then killed ends with
    Unavailable in its own thread; the process lives on."""
    errors = []
    started = threading.Event()

    def blocked():
        started.set()
        try:
            client.lookup(KEYS)
        except kvtier.Error as e:
            errors.append(e)

    os.kill(kvtierd.pid, signal.SIGSTOP)
    t = threading.Thread(target=blocked)
    t.start()
    started.wait()
    kvtierd.kill()
    t.join(timeout=30)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], kvtier.Unavailable)


def test_raise_status_maps_every_code():
    names = ["Cancelled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
             "AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
             "Aborted", "OutOfRange", "Unimplemented", "Internal", "Unavailable", "DataLoss",
             "Unauthenticated"]
    for code, name in enumerate(names, start=1):
        with pytest.raises(getattr(kvtier, name)) as e:
            kvtier._native._raise_status(code, f"message {code}")
        assert isinstance(e.value, kvtier.Error) and e.value.message == f"message {code}"
    assert issubclass(kvtier.InvalidArgument, ValueError)


def _curve_pair():
    """A CURVE key pair from `kvtierctl curve-keygen` (public, secret), Z85."""
    import subprocess
    from conftest import BUILD_DIR
    out = subprocess.run([os.path.join(BUILD_DIR, "tools", "kvtierctl"), "curve-keygen"],
                         check=True, capture_output=True, text=True).stdout.split("\n")
    keys = dict(line.split(" ", 1) for line in out if line)
    assert len(keys["public"]) == 40 and len(keys["secret"]) == 40
    return keys["public"], keys["secret"]


def test_curve_authentication(kvtierd_factory, tmp_path):
    """With --curve_secret_key_file the handshake is CURVE: a tenant's key pair
    connects as that tenant, an unknown key and PLAIN credentials do not."""
    server_pub, server_sec = _curve_pair()
    team_pub, team_sec = _curve_pair()
    stranger_pub, stranger_sec = _curve_pair()
    key_file = tmp_path / "curve.key"
    key_file.write_text(server_sec + "\n")
    key_file.chmod(0o600)
    tenants = {"tenants": [{"name": "team-a", "token": "secret-aaaa", "curve_public_key": team_pub}]}
    d = kvtierd_factory(flags=[f"--curve_secret_key_file={key_file}"], tenants=tenants,
                        probe_tenant="team-a", probe_token="secret-aaaa")
    with kvtier.Client(d.endpoint, tenant="team-a",
                       curve_keys=(server_pub, team_pub, team_sec)) as c:
        assert c.namespace == "team-a"
        c.ping()
    with pytest.raises(kvtier.Unauthenticated, match="unknown tenant or bad token"):
        kvtier.Client(d.endpoint, tenant="team-a", timeout_ms=3000,
                      curve_keys=(server_pub, stranger_pub, stranger_sec))
    # kvtierctl as that tenant, with the pair as curve-keygen prints it.
    import subprocess
    from conftest import BUILD_DIR
    keys = tmp_path / "team-a.keys"
    keys.write_text(f"public {team_pub}\nsecret {team_sec}\n")
    keys.chmod(0o600)
    ctl = os.path.join(BUILD_DIR, "tools", "kvtierctl")
    r = subprocess.run([ctl, f"--endpoint={d.endpoint}", "--tenant=team-a",
                        f"--curve_server_key={server_pub}", f"--curve_keys_file={keys}", "ping"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([ctl, f"--endpoint={d.endpoint}", f"--curve_server_key={server_pub}",
                        "ping"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--curve_keys_file" in r.stderr, r.stderr
    # PLAIN against a CURVE daemon: a clear error, not a timeout.
    with pytest.raises(kvtier.Error, match="different security mechanisms"):
        kvtier.Client(d.endpoint, tenant="team-a", token="secret-aaaa", timeout_ms=3000)
    # The key file must be the daemon's alone.
    key_file.chmod(0o644)
    bad = tmp_path / "open.key"
    bad.write_text(server_sec + "\n")
    bad.chmod(0o644)
    import subprocess
    from conftest import KVTIERD
    r = subprocess.run([KVTIERD, f"--curve_secret_key_file={bad}", f"--socket={tmp_path}/k.sock",
                        f"--state_dir={tmp_path}/state", "--nvme_bytes=0", "--host_bytes=16MiB"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "chmod 600" in r.stderr, r.stderr
