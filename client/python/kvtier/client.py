# kvtier.Client: the native session (every call releases the GIL and is
# serialised by the session's own mutex) plus what is easier in Python:
# registering a tensor, whichever memory it lives in, and `with` support.
import threading
from typing import NamedTuple

from . import _native


class Region(NamedTuple):
    """Where a registered tensor lies: its buffer id and byte offset in it."""
    buffer_id: int
    offset: int
    size: int


def _memory_of(t):
    """(address, nbytes, is_cuda) of a torch tensor or numpy array; raises for
    non-contiguous or empty ones and for objects that are neither."""
    if hasattr(t, "data_ptr") and hasattr(t, "is_contiguous"):  # torch.Tensor
        if not t.is_contiguous():
            raise ValueError("register_tensor: the tensor is not contiguous (call .contiguous() "
                             "on a copy and register that, or register the whole KV cache)")
        nbytes = t.numel() * t.element_size()
        return t.data_ptr(), nbytes, bool(t.is_cuda)
    if hasattr(t, "__array_interface__") and hasattr(t, "flags"):  # numpy.ndarray
        if not t.flags.c_contiguous:
            raise ValueError("register_tensor: the array is not C-contiguous")
        return t.__array_interface__["data"][0], t.nbytes, False
    raise TypeError(f"register_tensor takes a torch.Tensor or numpy.ndarray, got "
                    f"{type(t).__name__}")


class Client(_native.Client):
    """A session with kvtierd. See docs/PYTHON.md.

    Client(endpoint=None, tenant="default", token="", layout=None, timeout_ms=10000,
           client_name="", curve_keys=None) connects and authenticates in the
    ZeroMQ handshake: PLAIN with tenant/token, or CURVE with curve_keys =
    (daemon public key, tenant public key, tenant secret key), Z85, when the
    daemon runs --curve_secret_key_file (Unauthenticated on a bad tenant/token
    or key, Unavailable when no daemon answers within timeout_ms).
    Thread-safe: calls from several threads are serialised; each releases the GIL.
    Not re-entrant: a call from inside this client's own get_layers on_layer
    callback raises FailedPrecondition (the GET holds the client); see
    docs/PYTHON.md, "Callbacks".
    """

    def __init__(self, endpoint=None, tenant="default", token="", layout=None,
                 timeout_ms=10000, client_name="", curve_keys=None):
        super().__init__(endpoint, tenant, token, layout, timeout_ms, client_name, curve_keys)
        self._lock = threading.Lock()
        self._shm_ids = {}  # id(ShmBuffer) -> (buffer id, the buffer)

    def register_tensor(self, t):
        """Registers the memory of a contiguous tensor and returns Region(buffer_id,
        offset, size). A CUDA tensor: its cudaMalloc segment, by CUDA IPC handle,
        once per segment. A CPU tensor (or numpy array) that views a kvtier.ShmBuffer:
        that buffer, once. Anything else: TypeError."""
        address, nbytes, is_cuda = _memory_of(t)
        if nbytes == 0:
            raise ValueError("register_tensor: the tensor is empty")
        with self._lock:
            if is_cuda:
                buffer_id, offset, _device = self._register_cuda(address, nbytes)
                return Region(buffer_id, offset, nbytes)
            buf = _native._find_shm_buffer(address, nbytes)
            if buf is None:
                raise TypeError(
                    "register_tensor: this CPU tensor's memory is not in a kvtier.ShmBuffer; "
                    "the daemon can only reach shared memory. Allocate it as a view of one: "
                    "buf = kvtier.ShmBuffer(nbytes); t = torch.frombuffer(buf, dtype=...) "
                    "(or numpy.frombuffer), or use a CUDA tensor")
            entry = self._shm_ids.get(id(buf))
            if entry is None or entry[1] is not buf:
                entry = (self.register(buf), buf)
                self._shm_ids[id(buf)] = entry
            return Region(entry[0], address - buf.address, nbytes)

    def register(self, buffer):
        """Registers a kvtier.ShmBuffer; returns its buffer id. The client keeps the
        buffer alive until unregister() or close()."""
        return super().register(buffer)

    def unregister(self, buffer_id):
        super().unregister(buffer_id)
        with self._lock:
            for k, (bid, _) in list(self._shm_ids.items()):
                if bid == buffer_id:
                    del self._shm_ids[k]

    def close(self):
        """Ends the session (BYE); the daemon drops its registrations. Idempotent.
        From inside this client's own get_layers on_layer callback: FailedPrecondition,
        and the client stays open (close it after get_layers returns)."""
        super().close()
        self._shm_ids.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        state = "closed" if self.closed else f"namespace={self.namespace!r}"
        return f"<kvtier.Client {self.endpoint or _native.default_endpoint()} {state}>"
