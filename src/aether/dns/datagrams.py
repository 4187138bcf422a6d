"""`QueryBatch`: up to `BATCH_SIZE` UDP queries taken from a socket with one `recvmmsg` and answered with one
`sendmmsg` (Linux, through ctypes on libc: Python's socket module has neither).

Every buffer is allocated once. Each slot's datagram lands in two pieces: its 2-byte ID, and the rest right after
a `Transport.UDP.value` marker byte, so the bytes from the marker on are the answer cache's key as they are, with
no concatenation. A cached answer (the answer after its ID) is written over the query in its own slot and sent
with the query's own ID and to the query's own sender address, both still in the slot's buffers: the kernel's
address is never turned into a Python tuple on this path.

`QueryBatch.open` returns None where these calls are missing (not Linux, or no ctypes); the server then keeps
its loop of one `recvfrom` and one `sendto` per datagram.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import socket
import struct
import sys
from collections.abc import Callable

from aether.dns.answer import Transport

logger = logging.getLogger(__name__)

BATCH_SIZE = 64
"""Datagrams one `recvmmsg` takes at most (and one `sendmmsg` answers)."""
_SLOT = 1 << 16
"""Bytes per slot: the marker byte, then up to 65,535 bytes of datagram after its ID (more than any UDP payload)."""
_LEAD = 1
"""Slots start one byte in, so that slot 0's key slice of an empty datagram, `[start : start - 1]`, is empty
rather than counted from the end."""
_ID = 2
_MARKER = Transport.UDP.value
_MSG_DONTWAIT = 0x40
"""Linux's value (these are Linux calls; `socket.MSG_DONTWAIT` is missing on some platforms)."""
_RETRIED = (errno.EINTR, errno.ECONNREFUSED, errno.ECONNRESET)
"""`recvmmsg` errors after which the next datagram is still there: a signal, or an earlier ICMP error reported."""
_IPV4 = struct.Struct("!H4s")
_IPV6 = struct.Struct("!HI16s")
_SCOPE = struct.Struct("=I")

Lookup = Callable[[bytes], "tuple[bytes, float] | None"]
"""The answer cache's `get`: `Transport.UDP.value` + the query after its ID, to the answer after its ID and until
when it is right (see `MeshResolver.udp_lookup`)."""


class _IoVec(ctypes.Structure):
    _fields_ = (("base", ctypes.c_void_p), ("length", ctypes.c_size_t))


class _MsgHdr(ctypes.Structure):
    _fields_ = (
        ("name", ctypes.c_void_p),
        ("namelen", ctypes.c_uint32),
        ("iov", ctypes.POINTER(_IoVec)),
        ("iovlen", ctypes.c_size_t),
        ("control", ctypes.c_void_p),
        ("controllen", ctypes.c_size_t),
        ("flags", ctypes.c_int),
    )


class _MMsgHdr(ctypes.Structure):
    _fields_ = (("header", _MsgHdr), ("length", ctypes.c_uint))


def _libc_calls() -> tuple[Callable[..., int], Callable[..., int]] | None:
    """libc's `recvmmsg` and `sendmmsg`, or None where there are none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        receive, send = libc.recvmmsg, libc.sendmmsg
    except (OSError, AttributeError):
        return None
    # No argtypes: the calls get only small ints, None (NULL) and ready-made `c_void_p` pointers, which ctypes
    # passes as they are; argtypes would convert every argument on every call (3.7k of 8.6k instructions a call).
    receive.restype = send.restype = ctypes.c_int
    return receive, send


_CALLS = _libc_calls()


class QueryBatch:
    """The buffers of one batch of UDP queries on one socket, and the calls that fill and answer them.

    Use: `receive()` takes up to `BATCH_SIZE` datagrams; `answer_cached()` answers the slots whose answer is
    cached and returns the others; for those, `query()` and `sender()` give the datagram and its sender, and
    `reply()` puts an answer in the slot; `send()` sends every answered slot. A slot left without an answer
    (forwarded, or dropped) is skipped by `send()`. Only one task uses a batch, between its awaits.
    """

    def __init__(
        self,
        sock: socket.socket,
        *,
        receive: Callable[..., int],
        send: Callable[..., int],
        size: int = BATCH_SIZE,
    ) -> None:
        self._fd = sock.fileno()
        self._family = sock.family
        self._receive_call = receive
        self._send_call = send
        self._size = size
        name_size = ctypes.sizeof(_sockaddr_type(sock.family))
        self._memory = mmap.mmap(-1, _LEAD + size * _SLOT)  # untouched pages cost no memory
        """Slot `i` at `_LEAD + i * _SLOT`: the marker byte, then the datagram after its ID (or the answer after
        its ID)."""
        self._starts = [_LEAD + _SLOT * index for index in range(size)]
        """Where each slot starts in `_memory`: its marker byte."""
        self._ids = ctypes.create_string_buffer(size * _ID)
        self._id_bytes = memoryview(self._ids).cast("B")
        self._names = ctypes.create_string_buffer(size * name_size)
        self._name_size = name_size
        self._received = (_MMsgHdr * size)()
        self._replies = (_MMsgHdr * size)()
        self._receive_vectors = (_IoVec * (2 * size))()
        self._reply_vectors = (_IoVec * (2 * size))()
        memory_address = ctypes.addressof(ctypes.c_char.from_buffer(self._memory))
        ids_address = ctypes.addressof(self._ids)
        names_address = ctypes.addressof(self._names)
        for index in range(size):
            for vectors, length in ((self._receive_vectors, _SLOT - 1), (self._reply_vectors, 0)):
                vectors[2 * index].base = ids_address + _ID * index
                vectors[2 * index].length = _ID
                vectors[2 * index + 1].base = memory_address + _LEAD + _SLOT * index + 1
                vectors[2 * index + 1].length = length
            for messages, vectors in (
                (self._received, self._receive_vectors),
                (self._replies, self._reply_vectors),
            ):
                header = messages[index].header
                header.name = names_address + name_size * index
                header.namelen = name_size
                header.iov = ctypes.cast(
                    ctypes.byref(vectors, 2 * index * ctypes.sizeof(_IoVec)), ctypes.POINTER(_IoVec)
                )
                header.iovlen = 2
            self._memory[_LEAD + _SLOT * index] = _MARKER[0]
        self._received_pointer = ctypes.c_void_p(ctypes.addressof(self._received))
        self._reply_pointers = [
            ctypes.c_void_p(ctypes.addressof(self._replies) + index * ctypes.sizeof(_MMsgHdr))
            for index in range(size)
        ]
        """A pointer to each reply slot's `mmsghdr`: where a run of answers to send starts."""
        words = ctypes.sizeof(_MMsgHdr) // 4
        self._lengths = memoryview(self._received).cast("B").cast("I")[_MMsgHdr.length.offset // 4 :: words]
        """`msg_len` of each received slot: its datagram's length."""
        word = ctypes.sizeof(ctypes.c_size_t)
        self._reply_lengths = (
            memoryview(self._reply_vectors)
            .cast("B")
            .cast("Q" if word == 8 else "I")[
                (ctypes.sizeof(_IoVec) + _IoVec.length.offset) // word :: 2 * ctypes.sizeof(_IoVec) // word
            ]
        )
        """`iov_len` of each reply slot's second piece: the answer's length after its ID."""
        self._unanswered: list[int] = []
        self._count = 0

    @classmethod
    def open(cls, sock: socket.socket, *, size: int = BATCH_SIZE) -> QueryBatch | None:
        """A batch for the UDP socket `sock`, or None where `recvmmsg`/`sendmmsg` are missing."""
        if _CALLS is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
            return None
        receive, send = _CALLS
        return cls(sock, receive=receive, send=send, size=size)

    def receive(self) -> int:
        """Take the datagrams waiting on the socket, up to the batch's size, without blocking; return how many.

        Raises:
            OSError: the socket failed (not for "nothing waiting", a signal, or an earlier ICMP error).
        """
        while True:
            count = self._receive_call(self._fd, self._received_pointer, self._size, _MSG_DONTWAIT, None)
            if count >= 0:
                break
            code = ctypes.get_errno()
            if code in (errno.EAGAIN, errno.EWOULDBLOCK):
                count = 0
                break
            if code not in _RETRIED:
                raise OSError(code, f"recvmmsg: {errno.errorcode.get(code, code)}")
        self._count = count
        self._unanswered = []
        return count

    def answer_cached(self, lookup: Lookup, *, now: float) -> list[int]:
        """Answer, in their slots, the received queries whose answer `lookup` has and is right at `now`; return
        the other slots, in order."""
        # Slicing the mmap makes the key as bytes in one step (a memoryview would take two).
        memory = self._memory
        reply_lengths = self._reply_lengths
        unanswered = self._unanswered
        # strict=False: the range, the count received, ends first.
        for index, start, length in zip(range(self._count), self._starts, self._lengths, strict=False):
            entry = lookup(memory[start : start + length - 1])
            if entry is not None and now < entry[1]:
                answer = entry[0]
                size = len(answer)
                memory[start + 1 : start + 1 + size] = answer
                reply_lengths[index] = size
            else:
                unanswered.append(index)
        return list(unanswered)

    def query(self, index: int) -> bytes:
        """The datagram received in slot `index`."""
        length = self._lengths[index]
        start = _LEAD + index * _SLOT
        return (
            bytes(self._id_bytes[_ID * index : _ID * index + min(length, _ID)])
            + self._memory[start + 1 : start + max(length, _ID) - 1]
        )

    def sender(self, index: int) -> tuple[object, ...]:
        """The address slot `index`'s datagram came from, as `socket.recvfrom` gives it."""
        start = self._name_size * index
        name = self._names.raw[start : start + self._name_size]
        if self._family == socket.AF_INET:
            port, address = _IPV4.unpack_from(name, 2)
            return socket.inet_ntop(socket.AF_INET, address), port
        port, flow, address = _IPV6.unpack_from(name, 2)
        return socket.inet_ntop(socket.AF_INET6, address), port, flow, _SCOPE.unpack_from(name, 24)[0]

    def reply(self, index: int, response: bytes) -> None:
        """Send `response` (a whole answer, its ID that of the query) to slot `index`'s sender with the others."""
        ids_start = _ID * index
        start = _LEAD + index * _SLOT
        self._id_bytes[ids_start : ids_start + _ID] = response[:_ID]
        self._memory[start + 1 : start + len(response) - 1] = response[_ID:]
        self._reply_lengths[index] = len(response) - _ID
        self._unanswered.remove(index)

    def send(self) -> int:
        """Send the answers in the slots; return how many were not sent (a full send buffer drops the rest of a
        batch, as every UDP server does under overload: the clients retry)."""
        unsent = 0
        start = 0
        for gap in [*self._unanswered, self._count]:
            unsent += self._send_run(start, gap)
            start = gap + 1
        return unsent

    def _send_run(self, start: int, end: int) -> int:
        """Send the answers in slots `start` up to `end` with `sendmmsg`; return how many were not sent."""
        unsent = 0
        while start < end:
            sent = self._send_call(self._fd, self._reply_pointers[start], end - start, _MSG_DONTWAIT)
            if sent > 0:
                start += sent
                continue
            code = ctypes.get_errno()
            if code == errno.EINTR:
                continue
            if code in (errno.EAGAIN, errno.EWOULDBLOCK):
                logger.info(
                    "udp answers not sent: the socket's send buffer is full (%d dropped)", end - start
                )
                return unsent + end - start
            logger.info("udp answer to %s not sent: %s", self.sender(start), errno.errorcode.get(code, code))
            unsent += 1
            start += 1  # the kernel refused this one answer (its address, say): send the rest
        return unsent


def _sockaddr_type(family: int) -> type[ctypes.Array[ctypes.c_char]]:
    """A ctypes type the size of a `sockaddr_in` (16 bytes) or `sockaddr_in6` (28 bytes)."""
    return ctypes.c_char * (16 if family == socket.AF_INET else 28)
