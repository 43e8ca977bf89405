"""What every codec shares: the rows' shapes and JSON (rows.py), the connection facts' keys, redaction and SASL
user names (facts.py), Python rows to Arrow (arrow.py). The dialects' packages build on it, never on each other's
modules for these (the 0-10 codec's connection facts still extend the 0-9-1 family's ``ConnectionFacts``)."""
