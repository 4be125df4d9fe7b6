"""Container engines behind one transaction: each brings its document format and its service.

`base` holds the protocol; `docker` adapts the existing daemon.json path to it; `containerd`
and `crio` are packages of their own. `transaction` is the engine-agnostic transaction.
"""

ENGINES = ("docker", "containerd", "crio")
