/**
 * Frozen features of the training views: every view goes through the unprojected embedder (the
 * L2-normalised 448-d block-16 vector the service computes), then each value is rounded to a multiple of
 * 2^-12, so that a last-bit difference in onnxruntime's float sums cannot change the training input (and so
 * the trained bytes) unless a value sits exactly on a rounding boundary.
 */
import type { OnnxEmbedder } from '#lib/adapters/onnx-embedder.ts';
import type { TrainingSources } from './data.ts';
import { objectViews, prepareBackgrounds, prepareObjects, type View, type ViewKind } from './views.ts';

export interface FeatureSet {
  dimension: number;
  /** Row-major, one row per view. */
  features: Float32Array;
  /** Object index of each row. */
  objects: Int32Array;
  kinds: ViewKind[];
  objectNames: string[];
}

const QUANTUM = 4096;
/** Objects whose views are made concurrently (sharp uses its own thread pool). */
const OBJECTS_PER_BATCH = 8;

export function quantise(value: number): number {
  return Math.round(value * QUANTUM) / QUANTUM;
}

export async function extractFeatures(
  sources: TrainingSources,
  embedder: OnnxEmbedder,
  options: { seed: number; pastes: number; log?: (line: string) => void },
): Promise<FeatureSet> {
  const objects = await prepareObjects(sources, options.seed);
  const backgrounds = await prepareBackgrounds(sources.backgrounds);
  const rows: Float32Array[] = [];
  const objectIds: number[] = [];
  const kinds: ViewKind[] = [];
  let pending: Promise<Float32Array[]> | undefined;
  let pendingViews: View[] = [];
  const collect = async (): Promise<void> => {
    if (!pending) return;
    const vectors = await pending;
    vectors.forEach((vector, i) => {
      rows.push(vector.map(quantise));
      objectIds.push(pendingViews[i]!.object);
      kinds.push(pendingViews[i]!.kind);
    });
  };
  for (let start = 0; start < objects.length; start += OBJECTS_PER_BATCH) {
    const batch = objects.slice(start, start + OBJECTS_PER_BATCH);
    // Views of this batch are drawn while the model embeds the previous batch.
    const views = (
      await Promise.all(
        batch.map((object, i) => objectViews(object, start + i, backgrounds, options.seed, options.pastes)),
      )
    ).flat();
    await collect();
    pendingViews = views;
    pending = embedder.embed(views.map(({ bytes }) => bytes));
    if (options.log && start % (OBJECTS_PER_BATCH * 10) === 0)
      options.log(`features: ${start}/${objects.length} objects`);
  }
  await collect();
  const dimension = rows[0]?.length ?? 0;
  const features = new Float32Array(rows.length * dimension);
  rows.forEach((row, i) => features.set(row, i * dimension));
  return {
    dimension,
    features,
    objects: Int32Array.from(objectIds),
    kinds,
    objectNames: objects.map(({ name }) => name),
  };
}
