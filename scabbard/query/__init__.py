"""Fluent query API -> logical plan -> optimizer (persistence push-up, fusion). DESIGN.md §4, §9."""
