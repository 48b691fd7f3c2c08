/**
 * Frozen features of the training views: every view goes through the unprojected embedder (the
 * L2-normalised 448-d block-16 vector the service computes), and every pasted view also through the
 * regional pass, whose window around the pasted object gives one 'window' row (windows.ts). Each value is
 * rounded to a multiple of 2^-12, so that a last-bit difference in onnxruntime's float sums cannot change
 * the training input (and so the trained bytes) unless a value sits exactly on a rounding boundary.
 */
import type { OnnxEmbedder } from '#lib/adapters/onnx-embedder.ts';
import type { TrainingSources } from './data.ts';
import { objectViews, prepareBackgrounds, prepareObjects, type View, type ViewKind } from './views.ts';
import { windowFeatures, type FeatureMapSource } from './windows.ts';

/** A row's kind: the view it was embedded from, or 'window' (a pasted view's covering window, windows.ts). */
export type RowKind = ViewKind | 'window';

export interface FeatureSet {
  dimension: number;
  /** Row-major, one row per view. */
  features: Float32Array;
  /** Object index of each row (its position in the full object list, also for a sample). */
  objects: Int32Array;
  /** Each object's view rows, then its window rows (one per pasted view, in order). */
  kinds: RowKind[];
  objectNames: string[];
}

/** Features are multiples of 1/QUANTUM (and so stored exactly as int16 × 1/QUANTUM, recipe.ts). */
export const QUANTUM = 4096;
/** Objects whose views are made concurrently (sharp uses its own thread pool). */
const OBJECTS_PER_BATCH = 8;

/**
 * Rounds to a multiple of 1/QUANTUM. Adding +0 turns −0 into +0 (the committed int16 copy cannot keep its
 * sign, recipe.ts) and leaves NaN as it is, for the encoder to refuse.
 */
export function quantise(value: number): number {
  return Math.round(value * QUANTUM) / QUANTUM + 0;
}

export async function extractFeatures(
  sources: TrainingSources,
  embedder: OnnxEmbedder,
  regional: FeatureMapSource,
  options: {
    seed: number;
    pastes: number;
    log?: (line: string) => void;
    /**
     * Only these objects, by name → index in the full object list (the index seeds their views): a
     * sample's rows are then the full set's rows of those objects. Throws when one of them is missing.
     */
    sample?: ReadonlyMap<string, number>;
  },
): Promise<FeatureSet> {
  const { sample } = options;
  const objects = await prepareObjects(sources, options.seed, sample && ((name) => sample.has(name)));
  if (sample && objects.length !== sample.size) {
    const made = new Set(objects.map(({ name }) => name));
    const missing = [...sample.keys()].filter((name) => !made.has(name));
    throw new Error(`training objects not made from the sources: ${missing.join(', ')}`);
  }
  const indexOf = (position: number): number => (sample ? sample.get(objects[position]!.name)! : position);
  const backgrounds = await prepareBackgrounds(sources.backgrounds);
  const rows: Float32Array[] = [];
  const objectIds: number[] = [];
  const kinds: RowKind[] = [];
  let pending: Promise<Float32Array[]> | undefined;
  let pendingViews: View[] = [];
  const push = (vector: Float32Array, object: number, kind: RowKind): void => {
    rows.push(vector.map(quantise));
    objectIds.push(object);
    kinds.push(kind);
  };
  const collect = async (): Promise<void> => {
    if (!pending) return;
    const vectors = await pending;
    // Each object's view rows, then its window rows: the same order for a sample as for the full set.
    for (let i = 0; i < pendingViews.length; i += 1) {
      const { object, kind } = pendingViews[i]!;
      push(vectors[i]!, object, kind);
      if (pendingViews[i + 1]?.object === object) continue;
      for (const view of pendingViews)
        if (view.object === object && view.box)
          push(await windowFeatures(regional, view.bytes, view.box), object, 'window');
    }
  };
  for (let start = 0; start < objects.length; start += OBJECTS_PER_BATCH) {
    const batch = objects.slice(start, start + OBJECTS_PER_BATCH);
    // Views of this batch are drawn while the model embeds the previous batch.
    const views = (
      await Promise.all(
        batch.map((object, i) =>
          objectViews(object, indexOf(start + i), backgrounds, options.seed, options.pastes),
        ),
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
