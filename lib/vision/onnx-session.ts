/** onnxruntime sessions as this service runs them: CPU, one intra-op thread, full graph optimisation. */
import ort from 'onnxruntime-node';

export type InferenceSession = ort.InferenceSession;

/**
 * One intra-op thread by default: on a loaded 2-core box (or a 1–2 vCPU Lambda) it is steadier than two,
 * and concurrent requests already use the other core. `threads` raises it for a model on the critical path.
 *
 * With more than one thread, onnxruntime's pool threads spin-wait for work after every run unless
 * `spinWait` is set: in a service that CPU is taken from everything else running beside the model (the
 * query's ORB extraction, the embedder, the JS thread). Turning it off cut an image search's CPU from
 * 328 to 262 ms at 10k products (docs/benchmarks.md "Search CPU on an AVX2 host"); a batch job with
 * nothing else to do may keep it.
 */
export function createSession(
  modelPath: string,
  threads = 1,
  spinWait = false,
): Promise<ort.InferenceSession> {
  return ort.InferenceSession.create(modelPath, {
    executionProviders: ['cpu'],
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    graphOptimizationLevel: 'all',
    ...(spinWait
      ? {}
      : { extra: { session: { intra_op: { allow_spinning: '0' }, inter_op: { allow_spinning: '0' } } } }),
  });
}

export function floatTensor(data: Float32Array, dims: readonly number[]): ort.Tensor {
  return new ort.Tensor('float32', data, dims);
}

/** The float data of a named output, failing clearly if the graph does not have it. */
export function outputData(outputs: ort.InferenceSession.OnnxValueMapType, name: string): Float32Array {
  const tensor = outputs[name];
  if (!tensor) throw new Error(`model output ${name} is missing`);
  return tensor.data as Float32Array;
}
