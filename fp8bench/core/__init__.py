"""The vocabulary every layer shares: registries and the plugin base classes, cases' pipelines, records, shapes,
devices, units, and the small rules each screen and file applies the same way (escaping, redaction, noise, commits).

Nothing here imports another fp8bench layer (a precision appears in the plugin classes as a type only), so every
other sub-package may import it (docs/development.md, "Layers").
"""
