"""kiln_client: a standard-library client for kiln's HTTP API.

    from kiln_client import KilnClient
    client = KilnClient("http://127.0.0.1:8080", api_key="...")   # or $KILN_API_KEY
    result = client.execute("import numpy as np; np.arange(3).sum()")
    result.ok, result.result_text                                   # True, '3'

Modules: client (KilnClient), results (ExecutionResult), errors (KilnError),
_transport (HTTP, retries; shared by every endpoint).
"""

from .client import KilnClient
from .errors import KilnConnectionError, KilnError
from .results import PNG_SIGNATURE, ExecutionResult

__version__ = "0.1.0"
__all__ = ["KilnClient", "ExecutionResult", "KilnError", "KilnConnectionError", "PNG_SIGNATURE",
           "__version__"]
