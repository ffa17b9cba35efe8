"""PhosError: every failure phosd reports, with its gRPC status code."""
import grpc

# grpc.StatusCode members carry (number, name) tuples; OperationError.code in
# the stream is the bare number.
_CODE_BY_NUMBER = {code.value[0]: code for code in grpc.StatusCode}


class PhosError(Exception):
    """An operation or RPC phosd refused or that failed.

    Attributes:
        code: the grpc.StatusCode (e.g. grpc.StatusCode.NOT_FOUND for a pid
            that is not running under `phos run`, UNIMPLEMENTED for what phosd
            cannot do yet, UNAVAILABLE when no daemon answers).
        code_name: the code's name as a string ("NOT_FOUND").
        message: phosd's explanation (what failed and what to do).
        rpc: the RPC that failed ("Checkpoint", "Status", ...), or None.
    """

    def __init__(self, code, message, rpc=None):
        if isinstance(code, int):
            code = _CODE_BY_NUMBER.get(code, grpc.StatusCode.UNKNOWN)
        self.code = code
        self.message = message
        self.rpc = rpc
        super().__init__(str(self))

    @property
    def code_name(self):
        return self.code.name

    def __str__(self):
        # phosd's messages often name the RPC already ("Checkpoint: ...").
        where = self.rpc + ": " if self.rpc and not self.message.startswith(self.rpc + ":") else ""
        return "%s%s [%s]" % (where, self.message, self.code.name)

    @classmethod
    def from_rpc_error(cls, rpc, error):
        """Converts a grpc.RpcError raised by a stub call."""
        code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
        details = error.details() if hasattr(error, "details") else str(error)
        return cls(code or grpc.StatusCode.UNKNOWN, details or "no details from gRPC", rpc)
