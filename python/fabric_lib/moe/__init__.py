"""fabric_lib.moe: MoE dispatch/combine (expert parallelism) over fabric-lib's TransferEngine.

``P2PAllToAll`` (alias ``AllToAll``) has pplx-garden's constructor and pplx-kernels'
``dispatch``/``combine``; docs/moe.md describes the protocol, the buffers and the failure
semantics. The native part is the extension ``fabric_lib.moe._moe``.
"""

from .all_to_all import AllToAll, MoeError, P2PAllToAll

__all__ = ["AllToAll", "MoeError", "P2PAllToAll"]
