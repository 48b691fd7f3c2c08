/**
 * Fashion-MNIST category retrieval (Debian dataset-fashion-mnist, MIT): from the t10k split, the first
 * 2,000 images are the gallery and the next 500 the queries; precision@10 = share of a query's 10 nearest
 * gallery images (cosine) with the query's class.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import sharp from 'sharp';
import { EVAL_ROOT } from './fetch-data.ts';

const DATASET_DIR = join(EVAL_ROOT, 'usr/share/datasets/fashion-mnist');

export interface FashionSplit {
  images: Buffer[];
  labels: number[];
}

/** PNG-encoded 28×28 grey images and their labels, images [start, start + count) of the t10k split. */
export async function loadFashionMnist(start: number, count: number): Promise<FashionSplit> {
  const images = gunzipSync(readFileSync(join(DATASET_DIR, 't10k-images-idx3-ubyte.gz')));
  const labels = gunzipSync(readFileSync(join(DATASET_DIR, 't10k-labels-idx1-ubyte.gz')));
  if (images.readUInt32BE(0) !== 2051 || labels.readUInt32BE(0) !== 2049)
    throw new Error('fashion-mnist: unexpected idx magic');
  const [rows, cols] = [images.readUInt32BE(8), images.readUInt32BE(12)];
  const size = rows * cols;
  const out: FashionSplit = { images: [], labels: [] };
  for (let i = start; i < start + count; i += 1) {
    const pixels = images.subarray(16 + i * size, 16 + (i + 1) * size);
    out.images.push(
      await sharp(pixels, { raw: { width: cols, height: rows, channels: 1 } })
        .png()
        .toBuffer(),
    );
    out.labels.push(labels[8 + i]!);
  }
  return out;
}

/** Mean share of same-label items among each query's k nearest gallery vectors (dot product). */
export function precisionAtK(
  queries: readonly Float32Array[],
  queryLabels: readonly number[],
  gallery: readonly Float32Array[],
  galleryLabels: readonly number[],
  k: number,
): number {
  let total = 0;
  queries.forEach((query, q) => {
    const scores = gallery.map((item, index) => {
      let dot = 0;
      for (let d = 0; d < query.length; d += 1) dot += query[d]! * item[d]!;
      return { dot, index };
    });
    scores.sort((a, b) => b.dot - a.dot);
    total += scores.slice(0, k).filter(({ index }) => galleryLabels[index] === queryLabels[q]).length / k;
  });
  return total / queries.length;
}
