import { readdir, readFile } from 'node:fs/promises';
import sharp from 'sharp';

/**
 * Image-search request bodies of the 29 demo photos upscaled to 1000 × 750 JPEG (q90), `limit` 10: the
 * warm queries of bench/search.ts and bench/memory.ts.
 */
export async function demoQueryBodies(): Promise<string[]> {
  const demoDir = new URL('../demo/images/', import.meta.url);
  const names = (await readdir(demoDir)).filter((name) => name.endsWith('.webp'));
  return Promise.all(
    names.map(async (name) =>
      JSON.stringify({
        imageData: (
          await sharp(await readFile(new URL(name, demoDir)))
            .resize(1000, 750, { fit: 'fill' })
            .jpeg({ quality: 90 })
            .toBuffer()
        ).toString('base64'),
        limit: 10,
      }),
    ),
  );
}
