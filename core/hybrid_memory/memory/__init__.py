"""What an agent calls: the :class:`HybridMemory` facade, its scoped view and the write rules every backend applies."""

from .hybrid import HybridMemory

__all__ = ["HybridMemory"]
