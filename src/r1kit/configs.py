"""Moved: the recipe schema is `r1kit.config.schema`, the parser `r1kit.config.recipe`, Open-R1 compatibility
`r1kit.config.compat`. This module re-exports their names while callers move over."""

from r1kit.config.compat import KEY_MIGRATIONS, OPEN_R1_DEFAULTS  # noqa: F401
from r1kit.config.recipe import DEFAULT_RECIPE, load_recipe, parse_args  # noqa: F401
from r1kit.config.schema import *  # noqa: F401,F403
from r1kit.config.schema import check_choice, check_range  # noqa: F401
from r1kit.errors import ConfigError, ConfigWarning  # noqa: F401
