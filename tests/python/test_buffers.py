# Buffers without copies: numpy and torch views of a kvtier.ShmBuffer are the
# registered memory itself (what the daemon reads on PUT and writes on GET),
# views keep the buffer alive, and register_tensor finds a tensor's buffer and
# offset or says how to allocate one.
import gc
import os

import numpy as np
import pytest
import torch

import kvtier

LAYOUT = kvtier.Layout(layers=2, kv_heads=2, head_dim=64, tokens_per_page=64)
PB = LAYOUT.page_bytes


def chain(n, seed):
    return kvtier.page_keys(LAYOUT, [(seed * 7919 + i) % 50000 for i in range(n * 64)])


@pytest.fixture
def client(kvtierd):
    with kvtier.Client(kvtierd.endpoint, layout=LAYOUT) as c:
        yield c


def test_shm_buffer_properties_and_views():
    buf = kvtier.ShmBuffer(3 * 4096)
    assert buf.size == len(buf) == 3 * 4096
    assert buf.name.startswith("/kvtier-client-")
    mv = memoryview(buf)
    assert (mv.readonly, mv.ndim, mv.format, mv.nbytes) == (False, 1, "B", 3 * 4096)
    a = np.frombuffer(buf, dtype=np.float16)
    assert a.ctypes.data == buf.address and a.size == 3 * 4096 // 2
    a[:] = 1.5
    t = torch.frombuffer(buf, dtype=torch.float16)
    assert t.data_ptr() == buf.address
    assert torch.all(t == 1.5)
    t[0] = 2.0  # a write through torch shows in numpy: one memory
    assert a[0] == 2.0
    assert bytes(mv[:2]) == np.float16(2.0).tobytes()
    named = kvtier.ShmBuffer(4096, name="/kvtier-pytest-named")
    assert named.name == "/kvtier-pytest-named"
    with pytest.raises(kvtier.FailedPrecondition, match="File exists"):
        kvtier.ShmBuffer(4096, name="/kvtier-pytest-named")


def test_views_keep_the_buffer_alive():
    buf = kvtier.ShmBuffer(1 << 16)
    name = buf.name
    a = np.frombuffer(buf, dtype=np.uint8)
    a[:] = 7
    del buf
    gc.collect()
    assert (a == 7).all()  # still mapped: the view holds the buffer
    assert os.path.exists("/dev/shm" + name)
    del a
    gc.collect()
    assert not os.path.exists("/dev/shm" + name)  # unlinked with the last reference


def test_bad_buffer_sizes():
    with pytest.raises(ValueError, match="> 0"):
        kvtier.ShmBuffer(0)
    with pytest.raises(ValueError, match="> 0"):
        kvtier.ShmBuffer(-5)


def test_numpy_writes_are_what_the_daemon_stores(client):
    buf = kvtier.ShmBuffer(4 * PB)
    view = np.frombuffer(buf, dtype=np.uint16).reshape(4, PB // 2)
    bid = client.register(buf)
    keys = chain(2, seed=1)
    view[0] = np.arange(PB // 2, dtype=np.uint16)
    view[1] = 0xBEEF
    client.put(keys, bid, [0, PB])
    # The daemon's copy, read back inline (not through our buffer), is the view's bytes.
    stored = client.get_inline(keys)
    assert stored[0] == view[0].tobytes() and stored[1] == view[1].tobytes()
    # And a GET lands in the buffer where torch sees it.
    t = torch.frombuffer(buf, dtype=torch.int16).view(4, PB // 2)
    assert client.get(keys, bid, [2 * PB, 3 * PB]) == ["host", "host"]
    assert torch.equal(t[2], t[0]) and torch.equal(t[3], t[1])


def test_register_tensor_finds_buffer_and_offset(client):
    buf = kvtier.ShmBuffer(8 * PB)
    kv = torch.frombuffer(buf, dtype=torch.float16).view(8, PB // 2)
    whole = client.register_tensor(kv)
    assert (whole.offset, whole.size) == (0, 8 * PB)
    part = client.register_tensor(kv[3:5])  # a contiguous slice: same buffer, its offset
    assert part.buffer_id == whole.buffer_id
    assert (part.offset, part.size) == (3 * PB, 2 * PB)
    arr = np.frombuffer(buf, dtype=np.uint8)[PB:2 * PB]  # numpy arrays work too
    assert client.register_tensor(arr) == kvtier.Region(whole.buffer_id, PB, PB)
    # The region works for GET/PUT like any registered buffer.
    keys = chain(1, seed=2)
    kv[0] = 3.0
    client.put(keys, whole.buffer_id, [whole.offset])
    assert client.get(keys, part.buffer_id, [part.offset]) == ["host"]
    assert torch.all(kv[3] == 3.0)
    client.unregister(whole.buffer_id)
    again = client.register_tensor(kv)  # registered afresh after unregister
    assert again.buffer_id != whole.buffer_id


def test_register_tensor_refuses_other_memory(client):
    with pytest.raises(TypeError, match="not in a kvtier.ShmBuffer"):
        client.register_tensor(torch.zeros(1024))
    with pytest.raises(TypeError, match="not in a kvtier.ShmBuffer"):
        client.register_tensor(np.zeros(1024))
    with pytest.raises(TypeError, match="torch.Tensor or numpy.ndarray"):
        client.register_tensor(bytearray(1024))
    buf = kvtier.ShmBuffer(4 * 4096)
    t = torch.frombuffer(buf, dtype=torch.float32).view(64, 64)
    with pytest.raises(ValueError, match="not contiguous"):
        client.register_tensor(t.t())
    with pytest.raises(ValueError, match="not contiguous"):
        client.register_tensor(t[:, :8])
    with pytest.raises(ValueError, match="not C-contiguous"):
        client.register_tensor(np.frombuffer(buf, dtype=np.float32).reshape(64, 64).T)
    with pytest.raises(ValueError, match="empty"):
        client.register_tensor(t[:0])


def test_register_takes_only_shm_buffers(client):
    for bad in (bytearray(4096), np.zeros(4096, np.uint8), torch.zeros(10)):
        with pytest.raises(TypeError, match="kvtier.ShmBuffer"):
            client.register(bad)


@pytest.mark.skipif(not (kvtier.cuda_available() and torch.cuda.is_available()),
                    reason="needs a CUDA device and a CUDA build of torch: CUDA tensor "
                    "registration by IPC handle was not tested")
def test_register_cuda_tensor_pieces_of_one_allocation(client):
    big = torch.empty(8 * PB // 2, dtype=torch.float16, device="cuda")
    kv = big.view(8, PB // 2)
    r0 = client.register_tensor(kv[0:2])
    r1 = client.register_tensor(kv[4:6])
    assert r0.buffer_id == r1.buffer_id  # one segment, registered once
    assert r1.offset - r0.offset == 4 * PB
    keys = chain(2, seed=3)
    kv[0:2] = torch.arange(PB, device="cuda", dtype=torch.float16).view(2, PB // 2)
    client.put(keys, r0.buffer_id, [r0.offset, r0.offset + PB])
    kv[4:6] = 0
    assert client.get(keys, r1.buffer_id, [r1.offset, r1.offset + PB]) == ["host", "host"]
    assert torch.equal(kv[4:6], kv[0:2])
