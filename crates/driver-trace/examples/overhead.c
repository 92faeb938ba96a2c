/* Calls through a libcuda in a tight loop and prints the mean time per
 * call, for examples/overhead.rs: an allocation and its free (traced; the
 * pair, then each on its own) and cuMemGetInfo_v2 (not traced).
 *   overhead LIBCUDA ITERATIONS   (FAKE_CUDA_SCENARIO names the scenario)
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Allocations held at once while allocations and frees are timed apart. */
#define BATCH 1000

typedef int (*init_fn)(unsigned);
typedef int (*ctx_create_fn)(void **, unsigned, int);
typedef int (*alloc_fn)(unsigned long long *, size_t);
typedef int (*free_fn)(unsigned long long);
typedef int (*info_fn)(size_t *, size_t *);

static double now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	long n = atol(argv[2]);
	void *lib = dlopen(argv[1], RTLD_NOW);
	if (!lib)
		return 3;
	init_fn init = (init_fn)dlsym(lib, "cuInit");
	ctx_create_fn ctx = (ctx_create_fn)dlsym(lib, "cuCtxCreate_v2");
	alloc_fn alloc = (alloc_fn)dlsym(lib, "cuMemAlloc_v2");
	free_fn release = (free_fn)dlsym(lib, "cuMemFree_v2");
	info_fn info = (info_fn)dlsym(lib, "cuMemGetInfo_v2");
	void *context;
	if (init(0) || ctx(&context, 0, 0))
		return 4;
	unsigned long long pointer;
	double start = now_ns();
	for (long i = 0; i < n; i++) {
		if (alloc(&pointer, 4096) || release(pointer))
			return 5;
	}
	double traced = (now_ns() - start) / (2.0 * n);
	/* Allocations and frees timed apart, a batch of each at a time:
	 * reading the clock around every call would cost more than a call. */
	static unsigned long long batch[BATCH];
	double allocating = 0, freeing = 0;
	for (long done = 0; done < n; done += BATCH) {
		double before = now_ns();
		for (int i = 0; i < BATCH; i++)
			if (alloc(&batch[i], 4096))
				return 5;
		double between = now_ns();
		for (int i = 0; i < BATCH; i++)
			if (release(batch[i]))
				return 5;
		allocating += between - before;
		freeing += now_ns() - between;
	}
	long batched = (n + BATCH - 1) / BATCH * BATCH;
	size_t free_bytes, total;
	start = now_ns();
	for (long i = 0; i < n; i++)
		info(&free_bytes, &total);
	double untraced = (now_ns() - start) / n;
	printf("%.1f %.1f %.1f %.1f\n", traced, untraced, allocating / batched, freeing / batched);
	return 0;
}
