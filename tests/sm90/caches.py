"""sm_90 examples of the KV-cache writes."""

from tests.sm90 import Example
from tests.sm90 import meta as m

EXAMPLES = {
    "reshape_and_cache_flash": [
        Example(
            lambda: {
                "key": m((5, 2, 64), "float16"),
                "value": m((5, 2, 64), "float16"),
                "slot_mapping": m((5,), "int64"),
                "k_scale": m((1,), "float32"),
                "v_scale": m((1,), "float32"),
                "kv_cache_dtype": "auto",
                "key_cache": m((3, 16, 2, 64), "float16"),
                "value_cache": m((3, 16, 2, 64), "float16"),
            }
        )
    ],
}
