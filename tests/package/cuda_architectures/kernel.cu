__global__ void weft_guard_kernel() {}
