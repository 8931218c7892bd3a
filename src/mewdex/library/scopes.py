"""The library's view of scopes: the helpers of :mod:`mewdex.db.scopes`, re-exported (scope rows are
shared by every layer; the platform's accounts create them too)."""

from mewdex.db.scopes import default_scope, ensure_scope, storage_namespace

__all__ = ["default_scope", "ensure_scope", "storage_namespace"]
