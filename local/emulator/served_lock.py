"""Locks for threadgate's moto launcher (moto_server.py) that do not serve a call nobody waits for.

moto serves every DynamoDB call and every change to an SQS queue under one of two locks (see
moto_server.py), in one Python process. ServedLock is those locks: a reentrant lock that, when a
request's thread first takes it, drops the request if its client has already hung up.
"""

import select
import socket
import threading


class ClientGone(Exception):
    """The request's client hung up before its turn came: it is not carried out (see ServedLock)."""


# The connection of the request each server thread is serving (set by the launcher's keep-alive
# handler around each request).
served = threading.local()


def client_gone():
    """Whether the client of this thread's request has closed its connection: it gave up (the
    AWS SDK destroys the socket when its request timeout passes) and nobody reads the answer."""
    sock = getattr(served, "connection", None)
    if sock is None:
        return False
    try:
        # poll, not select: select cannot watch a descriptor numbered 1024 or more.
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        events = poller.poll(0)
        if not events:
            return False
        if events[0][1] & (select.POLLHUP | select.POLLERR | select.POLLNVAL):
            return True
        # Readable with no byte to peek is the client's FIN; bytes would be its next request.
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:  # reset under us: gone too
        return True


class ServedLock:
    """A reentrant lock that sheds a request whose client has gone by the time it gets the lock.

    When calls arrive faster than moto answers them they queue here; a caller whose request
    timeout passes (2 s for the functions) hangs up and tries again, but the abandoned request
    would still be carried out in its turn, so the queue fills with work nobody waits for and
    every live call waits past its own timeout too: measured in 2,000-record load runs at cap 50,
    where moto, once behind, never caught up again. AWS does not queue a call for seconds behind
    abandoned ones, and a caller that timed out cannot tell whether its call took effect, so a
    call whose client is gone when its turn comes is dropped (the connection closed, nothing
    answered) and the lock goes to the next one. Only a call that had to wait for the lock is
    checked: one that takes it at once has queued behind nothing (and costs no system call), and
    a thread that already holds it (moto's reentrant calls) always takes it at once, so a call
    that started is carried out whole.
    """

    def __init__(self):
        self._lock = threading.RLock()

    def __enter__(self):
        if self._lock.acquire(blocking=False):
            return self
        self._lock.acquire()
        if client_gone():
            self._lock.release()
            raise ClientGone()
        return self

    def __exit__(self, *exc):
        self._lock.release()
        return False
