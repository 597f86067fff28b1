"""kiln_client: a standard-library client for kiln's HTTP API.

    from kiln_client import KilnClient
    client = KilnClient("http://127.0.0.1:8080", api_key="...")   # or $KILN_API_KEY
    result = client.execute("import numpy as np; np.arange(3).sum()")
    result.ok, result.result_text                                   # True, '3'

    with client.create_session() as session:                       # state carries over
        session.execute("x = 41")
        session.execute("x + 1").result_text                        # '42'
        for name, data in session.stream("print('live')"):          # events as they happen
            ...

Modules: client (KilnClient), sessions (Session, SessionInfo, WorkspaceFile),
streaming (EventStream, StreamEvent), results (ExecutionResult), errors
(KilnError and its subclasses), _transport (HTTP, retries; shared by every
endpoint), _sse (the Server-Sent Events parser).
"""

from .client import KilnClient
from .errors import (BadRequest, KilnConnectionError, KilnError, NotFound, PayloadTooLarge,
                     SessionBusy, SessionGone)
from .results import PNG_SIGNATURE, ExecutionResult
from .sessions import Session, SessionInfo, WorkspaceFile
from .streaming import EventStream, StreamEvent

__version__ = "0.2.0"
__all__ = ["KilnClient", "ExecutionResult", "Session", "SessionInfo", "WorkspaceFile",
           "EventStream", "StreamEvent", "KilnError", "KilnConnectionError", "BadRequest",
           "NotFound", "SessionBusy", "SessionGone", "PayloadTooLarge", "PNG_SIGNATURE",
           "__version__"]
