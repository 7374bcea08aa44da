"""Built-in problems; importing this package registers them all."""
from problems import translate  # noqa: F401
