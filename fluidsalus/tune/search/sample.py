"""Ray's module path ``ray.tune.search.sample``: the domain classes (for ``isinstance`` checks in a search
algorithm of your own) and the sampling functions, from :mod:`fluidsalus.space`.

Ray's ``randn``/``qrandn`` make a ``Float`` with a normal sampler; fluidsalus's make a ``fluidsalus.space.Normal``
domain, so ``isinstance(tune.randn(), Float)`` is False here.
"""

from fluidsalus.space import (
    Categorical,
    Domain,
    Float,
    Function,
    Integer,
    choice,
    lograndint,
    loguniform,
    qlograndint,
    qloguniform,
    qrandint,
    qrandn,
    quniform,
    randint,
    randn,
    sample_from,
    uniform,
)

__all__ = ["Categorical", "Domain", "Float", "Function", "Integer", "choice", "lograndint", "loguniform",
           "qlograndint", "qloguniform", "qrandint", "qrandn", "quniform", "randint", "randn", "sample_from",
           "uniform"]
