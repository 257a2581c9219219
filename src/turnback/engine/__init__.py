"""The rules: turn lifecycle and write order, journal durability, recovery, set-aside."""
