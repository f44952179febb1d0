"""Ray's conversion of a ``tune.*`` space for the model-based search algorithms it hands to other libraries
(``AxSearch``, ``HEBOSearch``): floats, ints and categories, each as it is; a quantization dropped with a warning;
a grid or any other kind of parameter refused."""

from __future__ import annotations

import warnings
from typing import Any

from fluidsalus import space as sp
from fluidsalus.errors import ConfigError

__all__ = ["a_kind", "model_space"]


def a_kind(domain: object) -> str:
    """``"a Float"``, ``"an Integer"``: a search-space domain's class with its article, for error messages (one
    said "a Integer parameter")."""
    name = type(domain).__name__
    return f"{'an' if name[:1] in 'AEIOU' else 'a'} {name}"


def model_space(owner: str, library: str, space: dict[str, Any]) -> dict[str, Any]:
    """``space`` as Ray converts it for ``library``: uniform and log-uniform floats and ints, and categories.

    Args:
        owner: The search algorithm's class name, for messages.
        library: The library Ray hands the space to (``"Ax"``, ``"HEBO"``), for messages.
        space: The space, with fluidsalus domains and constants.

    Returns:
        The space with each quantized float or int replaced by its unquantized domain (over the same values'
        range, as Ray's bounds are), with a warning per parameter.

    Raises:
        ConfigError: A grid, or a parameter of another kind (a normal distribution, ``sample_from``).
    """
    if sp.has_grid(space):
        raise ConfigError(f"{owner}: grid_search parameters cannot be converted into {library}'s search space (as in "
                          "Ray); use tune.choice")
    domains, constants = sp.split_constants(space)
    converted: dict[str, Any] = {}
    for path, domain in domains.items():
        if isinstance(domain, sp.Float):
            if domain.q is not None:
                warnings.warn(f"{owner}: {path}: {library} does not support quantization; {domain!r}'s is dropped, "
                              "as Ray drops it", UserWarning, stacklevel=4)
                domain = (sp.Float(domain.lower, domain.upper, log=True, base=domain.base) if domain.log
                          else sp.uniform(domain.lower, domain.upper))
        elif isinstance(domain, sp.Integer):
            if domain.q is not None and domain.q != 1:  # its upper bound is included: randint's is not
                warnings.warn(f"{owner}: {path}: {library} does not support quantization; {domain!r}'s is dropped, "
                              "as Ray drops it", UserWarning, stacklevel=4)
                domain = (sp.Integer(domain.lower, domain.upper + 1, log=True, base=domain.base) if domain.log
                          else sp.randint(domain.lower, domain.upper + 1))
        elif not isinstance(domain, sp.Categorical):
            raise ConfigError(f"{owner}: {path} is {a_kind(domain)} parameter, which {library} cannot search "
                              "(as in Ray); use tune.uniform, tune.randint, tune.choice and their kin")
        converted[path] = domain
    return sp.unflatten({**constants, **converted})
