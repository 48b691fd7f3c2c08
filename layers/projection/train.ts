/**
 * Trains the projection head on a feature set: W starts as the PCA-whitening of the training features
 * (the baseline it must beat) and is refined with Adam on the InfoNCE objective of contrastive.ts, plus
 * an L2 pull towards the start (the data set is small: a few hundred objects). Deterministic: the batch
 * order comes from a seeded PRNG and every sum runs in a fixed order.
 */
import { infoNceLossAndGradient, infoNceQueryLossAndGradient, projectRows } from './contrastive.ts';
import type { FeatureSet } from './features.ts';
import { pcaWhitening } from './linalg.ts';
import { seededRandom } from './views.ts';

export interface TrainOptions {
  seed: number;
  outDim: number;
  temperature: number;
  epochs: number;
  /** Objects per batch (all their views are in it). */
  batchObjects: number;
  /** Adam step, relative to the root-mean-square entry of the starting W. */
  learningRate: number;
  /** Weight of ‖W − W₀‖² / ‖W₀‖² in the loss. */
  anchor: number;
  /** Eigenvalue floor of the whitening start, as a fraction of the mean eigenvalue. */
  whiteningEpsilon: number;
}

export interface TrainedProjection {
  inDim: number;
  outDim: number;
  mean: Float64Array;
  /** outDim×inDim, row-major. */
  matrix: Float64Array;
  losses: number[];
}

/**
 * Adam on W with an L2 pull towards its start (weight `anchor` on ‖W − W₀‖² / ‖W₀‖²); the step is
 * relative to the root-mean-square entry of W₀. Returns the update, applied in place.
 */
function anchoredAdam(
  initial: Float64Array,
  learningRate: number,
  anchor: number,
): (matrix: Float64Array, gradient: Float64Array) => void {
  let initialSquares = 0;
  for (const value of initial) initialSquares += value * value;
  const step = learningRate * Math.sqrt(initialSquares / initial.length);
  const m = new Float64Array(initial.length);
  const v = new Float64Array(initial.length);
  const [beta1, beta2] = [0.9, 0.999];
  let t = 0;
  return (matrix, gradient) => {
    t += 1;
    const correction1 = 1 - beta1 ** t;
    const correction2 = 1 - beta2 ** t;
    for (let k = 0; k < matrix.length; k += 1) {
      const g = gradient[k]! + (2 * anchor * (matrix[k]! - initial[k]!)) / initialSquares;
      m[k] = beta1 * m[k]! + (1 - beta1) * g;
      v[k] = beta2 * v[k]! + (1 - beta2) * g * g;
      matrix[k]! -= (step * (m[k]! / correction1)) / (Math.sqrt(v[k]! / correction2) + 1e-12);
    }
  };
}

/**
 * The training loop both matrices share: per epoch, the usable objects in a seeded order, cut into
 * batches of `batchObjects` (a last batch of one is skipped: InfoNCE needs a negative); `step` trains on
 * one batch and returns its loss. Returns the mean loss of each epoch.
 */
function epochs(
  usable: readonly number[],
  options: { seed: number; epochs: number; batchObjects: number },
  label: string,
  log: ((line: string) => void) | undefined,
  step: (objects: number[]) => number,
): number[] {
  const random = seededRandom(options.seed);
  const losses: number[] = [];
  for (let epoch = 0; epoch < options.epochs; epoch += 1) {
    const order = shuffled(usable.length, random).map((i) => usable[i]!);
    let epochLoss = 0;
    let batches = 0;
    for (let b = 0; b < order.length; b += options.batchObjects) {
      const objects = order.slice(b, b + options.batchObjects);
      if (objects.length < 2) continue;
      epochLoss += step(objects);
      batches += 1;
    }
    losses.push(epochLoss / Math.max(batches, 1));
    log?.(`${label}: epoch ${epoch + 1}/${options.epochs} loss ${losses.at(-1)!.toFixed(4)}`);
  }
  return losses;
}

export function shuffled(count: number, random: () => number): number[] {
  const order = Array.from({ length: count }, (_, i) => i);
  for (let i = count - 1; i > 0; i -= 1) {
    const j = Math.floor(random() * (i + 1));
    [order[i], order[j]] = [order[j]!, order[i]!];
  }
  return order;
}

/** The PCA-whitening start alone (the baseline), fitted on every training view. */
export function whiteningOf(set: FeatureSet, outDim: number, epsilon: number): TrainedProjection {
  const { mean, matrix } = pcaWhitening(set.features, set.dimension, outDim, epsilon);
  return { inDim: set.dimension, outDim, mean, matrix, losses: [] };
}

export function trainProjection(
  set: FeatureSet,
  options: TrainOptions,
  log?: (line: string) => void,
): TrainedProjection {
  // Window rows are the window projection's (trainWindowProjection): here they would join μ, the
  // whitening and the queries. trainRecipe passes the view rows only (splitRows).
  if (set.kinds.includes('window'))
    throw new Error('trainProjection takes view rows only: split the window rows off first (splitRows)');
  const d = set.dimension;
  const start = whiteningOf(set, options.outDim, options.whiteningEpsilon);
  const { mean } = start;
  const matrix = Float64Array.from(start.matrix);
  const adam = anchoredAdam(start.matrix, options.learningRate, options.anchor);

  const rows = set.objects.length;
  const centred = new Float64Array(rows * d);
  for (let i = 0; i < rows; i += 1)
    for (let k = 0; k < d; k += 1) centred[i * d + k] = set.features[i * d + k]! - mean[k]!;
  const packshotRow = new Int32Array(set.objectNames.length).fill(-1);
  const queryRows: number[][] = set.objectNames.map(() => []);
  for (let i = 0; i < rows; i += 1) {
    if (set.kinds[i] === 'packshot') packshotRow[set.objects[i]!] = i;
    else queryRows[set.objects[i]!]!.push(i);
  }
  const usable = [...packshotRow.keys()].filter((o) => packshotRow[o]! >= 0 && queryRows[o]!.length > 0);

  const losses = epochs(usable, options, 'train', log, (objects) => {
    const queryIndices = objects.flatMap((object, slot) => queryRows[object]!.map((row) => [row, slot]));
    const queries = new Float64Array(queryIndices.length * d);
    const targets = new Int32Array(queryIndices.length);
    queryIndices.forEach(([row, slot], i) => {
      queries.set(centred.subarray(row! * d, row! * d + d), i * d);
      targets[i] = slot!;
    });
    const packshots = new Float64Array(objects.length * d);
    objects.forEach((object, slot) =>
      packshots.set(centred.subarray(packshotRow[object]! * d, packshotRow[object]! * d + d), slot * d),
    );
    const { loss, gradient } = infoNceLossAndGradient(
      matrix,
      options.outDim,
      d,
      queries,
      targets,
      packshots,
      options.temperature,
    );
    adam(matrix, gradient);
    return loss;
  });
  return { inDim: d, outDim: options.outDim, mean, matrix, losses };
}

/** The window projection's options: the main projection's, but for the whitening start it does not have. */
export type WindowTrainOptions = Omit<TrainOptions, 'outDim' | 'whiteningEpsilon'>;

/** The rows of `kind`, and of every other kind, as two feature sets over the same objects. */
export function splitRows(set: FeatureSet, kind: FeatureSet['kinds'][number]): [FeatureSet, FeatureSet] {
  const pick = (keep: (row: number) => boolean): FeatureSet => {
    const rows = [...set.objects.keys()].filter(keep);
    const features = new Float32Array(rows.length * set.dimension);
    rows.forEach((row, i) =>
      features.set(set.features.subarray(row * set.dimension, (row + 1) * set.dimension), i * set.dimension),
    );
    return {
      dimension: set.dimension,
      features,
      objects: Int32Array.from(rows, (row) => set.objects[row]!),
      kinds: rows.map((row) => set.kinds[row]!),
      objectNames: set.objectNames,
    };
  };
  return [pick((row) => set.kinds[row] === kind), pick((row) => set.kinds[row] !== kind)];
}

/**
 * The window projection: a second matrix for the regional pass's windows, trained so that
 * normalise(W_w·(x − μ)) of a pasted view's covering window (features.ts 'window' rows) is nearest to
 * its own packshot as `projection` embeds it, among the packshots of the batch (InfoNCE, the packshots
 * fixed). It starts from `projection` (same μ, W_w = W) and is pulled towards it: the catalogue's vectors
 * and the whole-image query stay those of `projection`; only the windows move.
 */
export function trainWindowProjection(
  set: FeatureSet,
  projection: { mean: Float64Array; matrix: Float64Array; outDim: number },
  options: WindowTrainOptions,
  log?: (line: string) => void,
): TrainedProjection {
  const d = set.dimension;
  const { mean, outDim } = projection;
  const matrix = Float64Array.from(projection.matrix);
  const adam = anchoredAdam(projection.matrix, options.learningRate, options.anchor);
  const centredRow = (row: number, out: Float64Array, at: number): void => {
    for (let k = 0; k < d; k += 1) out[at * d + k] = set.features[row * d + k]! - mean[k]!;
  };
  const packshotRow = new Int32Array(set.objectNames.length).fill(-1);
  const windowRows: number[][] = set.objectNames.map(() => []);
  for (let row = 0; row < set.kinds.length; row += 1) {
    if (set.kinds[row] === 'packshot') packshotRow[set.objects[row]!] = row;
    else if (set.kinds[row] === 'window') windowRows[set.objects[row]!]!.push(row);
  }
  const usable = [...packshotRow.keys()].filter((o) => packshotRow[o]! >= 0 && windowRows[o]!.length > 0);
  // The packshots' vectors under the fixed projection: the targets.
  const packshots = new Float64Array(usable.length * d);
  usable.forEach((object, i) => centredRow(packshotRow[object]!, packshots, i));
  const fixed = projectRows(projection.matrix, outDim, packshots, d).y;
  const slotOf = new Map(usable.map((object, i) => [object, i]));

  const losses = epochs(usable, options, 'train windows', log, (objects) => {
    const rows = objects.flatMap((object, slot) => windowRows[object]!.map((row) => [row, slot] as const));
    const queries = new Float64Array(rows.length * d);
    const targets = new Int32Array(rows.length);
    rows.forEach(([row, slot], i) => {
      centredRow(row, queries, i);
      targets[i] = slot;
    });
    const batchTargets = new Float64Array(objects.length * outDim);
    objects.forEach((object, slot) => {
      const at = slotOf.get(object)! * outDim;
      batchTargets.set(fixed.subarray(at, at + outDim), slot * outDim);
    });
    const { loss, gradient } = infoNceQueryLossAndGradient(
      matrix,
      outDim,
      d,
      queries,
      targets,
      batchTargets,
      options.temperature,
    );
    adam(matrix, gradient);
    return loss;
  });
  return { inDim: d, outDim, mean: Float64Array.from(mean), matrix, losses };
}
