"""sdpa_attention_forward that records its call and returns (marker, None)."""
calls = []


def sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs):
    calls.append(dict(attention_mask=attention_mask, **kwargs))
    return "sdpa", None
