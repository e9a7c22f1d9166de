// Three transposes of an n x n float matrix on the GPU, timed: naive (coalesced reads, strided
// writes), tiled through shared memory (both coalesced, but the tile is read by columns: 32-way
// bank conflicts), and the same tile padded by one column (no conflicts). bank_conflicts.py beside
// this file counts the sectors and bank passes each kernel costs; this program measures them.
//
// Build and run:  nvcc -std=c++20 -O2 -arch=sm_80 transpose.cu -o transpose && ./transpose 4096
#include <cstdio>
#include <cstdlib>
#include <vector>

constexpr int TILE = 32;       // a tile's side: one warp spans a row of it
constexpr int BLOCK_ROWS = 8;  // a block of 32 x 8 threads moves a 32 x 32 tile, 4 rows a thread

#define CHECK(call)                                                                  \
  do {                                                                               \
    cudaError_t status_ = (call);                                                    \
    if (status_ != cudaSuccess) {                                                    \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(status_)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

// region kernels
// Thread (x, y) reads in[y][x] (a warp reads 32 consecutive floats: 4 sectors) and writes
// out[x][y] (a warp writes 32 floats n apart: 32 sectors, each used for 4 of its 32 bytes).
__global__ void transpose_naive(float* out, const float* in, int n) {
  int x = blockIdx.x * TILE + threadIdx.x;
  int y = blockIdx.y * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += BLOCK_ROWS) out[x * n + (y + j)] = in[(y + j) * n + x];
}

// Read a tile by rows into shared memory, then write the transposed tile by rows: every global
// access is coalesced. Reading tile[threadIdx.x][...] walks a column of the tile: with 32 floats
// a row, all 32 threads of a warp hit one bank.
__global__ void transpose_tiled(float* out, const float* in, int n) {
  __shared__ float tile[TILE][TILE];
  int x = blockIdx.x * TILE + threadIdx.x;
  int y = blockIdx.y * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += BLOCK_ROWS) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * n + x];
  __syncthreads();
  x = blockIdx.y * TILE + threadIdx.x;  // the transposed tile's place
  y = blockIdx.x * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += BLOCK_ROWS) out[(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];
}

// The same, with one float of padding a row: a column's words are 33 apart, so 32 banks apart
// plus one, and a warp's 32 reads land in 32 different banks.
__global__ void transpose_padded(float* out, const float* in, int n) {
  __shared__ float tile[TILE][TILE + 1];
  int x = blockIdx.x * TILE + threadIdx.x;
  int y = blockIdx.y * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += BLOCK_ROWS) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * n + x];
  __syncthreads();
  x = blockIdx.y * TILE + threadIdx.x;
  y = blockIdx.x * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += BLOCK_ROWS) out[(y + j) * n + x] = tile[threadIdx.x][threadIdx.y + j];
}
// endregion

// Copy in to out with the same access pattern as the tiled reads: the bandwidth a transpose can hope for.
__global__ void copy(float* out, const float* in, int n) {
  int x = blockIdx.x * TILE + threadIdx.x;
  int y = blockIdx.y * TILE + threadIdx.y;
  for (int j = 0; j < TILE; j += BLOCK_ROWS) out[(y + j) * n + x] = in[(y + j) * n + x];
}

using Kernel = void (*)(float*, const float*, int);

// Mean milliseconds of one launch over `repeats`, after a warm-up launch.
float time_kernel(Kernel kernel, float* out, const float* in, int n, int repeats) {
  dim3 grid(n / TILE, n / TILE), block(TILE, BLOCK_ROWS);
  kernel<<<grid, block>>>(out, in, n);
  CHECK(cudaGetLastError());
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  CHECK(cudaEventRecord(start));
  for (int i = 0; i < repeats; ++i) kernel<<<grid, block>>>(out, in, n);
  CHECK(cudaEventRecord(stop));
  CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(stop));
  return ms / repeats;
}

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 4096;
  if (n <= 0 || n % TILE != 0) {
    std::fprintf(stderr, "n must be a positive multiple of %d\n", TILE);
    return 2;
  }
  std::size_t count = std::size_t(n) * n, bytes = count * sizeof(float);
  std::vector<float> host(count), back(count);
  for (std::size_t i = 0; i < count; ++i) host[i] = float(i % 9973) * 0.5f;
  float *in = nullptr, *out = nullptr;
  CHECK(cudaMalloc(&in, bytes));
  CHECK(cudaMalloc(&out, bytes));
  CHECK(cudaMemcpy(in, host.data(), bytes, cudaMemcpyHostToDevice));

  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d x %d floats, tile %d, %d threads a block\n", prop.name, n, n, TILE, TILE * BLOCK_ROWS);
  struct Named {
    const char* name;
    Kernel kernel;
    bool transposes;
  } kernels[] = {{"copy", copy, false}, {"naive", transpose_naive, true}, {"tiled", transpose_tiled, true}, {"tiled+pad", transpose_padded, true}};
  for (const Named& k : kernels) {
    CHECK(cudaMemset(out, 0, bytes));
    float ms = time_kernel(k.kernel, out, in, n, 20);
    CHECK(cudaMemcpy(back.data(), out, bytes, cudaMemcpyDeviceToHost));
    std::size_t wrong = 0;
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < n; ++c) wrong += back[std::size_t(r) * n + c] != (k.transposes ? host[std::size_t(c) * n + r] : host[std::size_t(r) * n + c]);
    double gbps = 2.0 * double(bytes) / (ms * 1e-3) / 1e9;  // read once, written once
    std::printf("%-10s %8.3f ms  %7.1f GB/s  %s\n", k.name, ms, gbps, wrong == 0 ? "correct" : "WRONG");
    if (wrong != 0) return 1;
  }
  CHECK(cudaFree(in));
  CHECK(cudaFree(out));
  return 0;
}
