import numpy as np
import pagedattn

N, H, HK, D, BLOCK = 3, 4, 2, 64, 16  # one sequence of 3 new tokens; 4 query heads over 2 KV heads
rng = np.random.default_rng(0)
q = rng.standard_normal((N, H * D)).astype(np.float16)
k, v = (rng.standard_normal((N, HK * D)).astype(np.float16) for _ in range(2))
k_cache, v_cache = (np.zeros((1, BLOCK, HK, D), np.float16) for _ in range(2))  # a pool of 1 block
out = pagedattn.paged_attention(q, k, v, k_cache, v_cache, np.array([0, N], np.int32),
                                np.array([0], np.int32), np.array([[0]], np.int32),
                                num_heads=H, kv_num_heads=HK)  # numpy in: the reference executor
print(out.shape, out.dtype, "cache written:", np.array_equal(k_cache[0, :N].reshape(N, -1), k))
