"""Helpers with Ray Tune's module paths (``ray.tune.utils``) that Ray's examples import."""
