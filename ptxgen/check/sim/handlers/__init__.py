"""The machine's instruction handlers, one module per instruction family.

Each module is a mixin of :class:`~ptxgen.check.sim.machine.Machine` (or, for the block-scaled NVFP4
ops, functions of it): a handler takes the issuing warp and the walker's event (the op and its evaluated
operands), checks the rules of its instruction (PTX ISA section named in each module) and updates the machine
or schedules an asynchronous unit.  ``Machine._handlers`` maps each op type to its handler.
"""
