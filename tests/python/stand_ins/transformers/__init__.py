"""A stand-in for the corner of transformers that fijit.integrations.transformers
touches (the attention and mask registries, sdpa_mask, sdpa_attention_forward), for
CPU tests without transformers: what it is asked is recorded, for the tests to read."""
__version__ = "stand-in"


class _Registry(dict):
    def register(self, name, fn):
        self[name] = fn


AttentionInterface = _Registry()
