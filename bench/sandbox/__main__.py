"""``python -m bench.sandbox PROTO_FD STATUS_FD WORKDIR``: the sandboxed child's bootstrap."""

import sys

from bench.sandbox.guard import bootstrap

bootstrap(sys.argv[1:])
