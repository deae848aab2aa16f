"""The PTX differential: the emitted PTX of a kernel does, thread by thread, what its IR says.

:mod:`.interp` interprets the PTX the emitters write (one thread, straight-line and loops, the
instruction forms the emitters use) and records its effects; :mod:`.diff` runs the IR's reference
interpreter (:mod:`ptxgen.check.walker`) for the same thread and compares the two effect lists in
order.  A mismatch names the thread, the position and both effects.
"""
