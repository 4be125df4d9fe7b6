"""Container engines behind one transaction: each brings its document format and its service.

`base` holds the protocols the transaction drives; `transaction` is the engine-agnostic
transaction; `front` and `registry` are what the command line sees of engines. `docker`,
`containerd` and `crio` are one folder each (docs/layout.md).
"""
