/**
 * Test images for geometric verification, all cut from committed MIT-licensed photos: products cropped out
 * of a real tote photo (the "catalogue"), tiles of two unrelated photos (distractors), and query views
 * made with sharp (rotation, scale, crop, JPEG, mirror).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import sharp from 'sharp';

const HERE = join(import.meta.dirname, 'fixtures');
export const SHELF = readFileSync(join(HERE, 'arc2017-shelf.jpg'));
export const GROVE = readFileSync(join(HERE, 'middlebury-grove3.jpg'));
export const DINNER = readFileSync(join(import.meta.dirname, '../../fixtures/vision/voc-dinner.jpg'));

interface Region {
  left: number;
  top: number;
  width: number;
  height: number;
}

/** Products in the 640×480 tote photo. */
export const PRODUCTS = {
  book: { left: 148, top: 296, width: 124, height: 150 },
  soap: { left: 236, top: 390, width: 100, height: 76 },
  mousetrap: { left: 334, top: 266, width: 128, height: 126 },
  towels: { left: 378, top: 158, width: 212, height: 204 },
  organiser: { left: 214, top: 162, width: 150, height: 150 },
} as const satisfies Record<string, Region>;

export function crop(image: Buffer, region: Region): Promise<Buffer> {
  return sharp(image).extract(region).png().toBuffer();
}

/** Non-overlapping tiles of a photo, row by row. */
async function tiles(
  image: Buffer,
  columns: number,
  rows: number,
  prefix: string,
): Promise<Map<string, Buffer>> {
  const { width = 0, height = 0 } = await sharp(image).metadata();
  const w = Math.floor(width / columns);
  const h = Math.floor(height / rows);
  const out = new Map<string, Buffer>();
  for (let r = 0; r < rows; r++) {
    for (let c = 0; c < columns; c++) {
      out.set(`${prefix}-${r}-${c}`, await crop(image, { left: c * w, top: r * h, width: w, height: h }));
    }
  }
  return out;
}

/** 23 catalogue images: the 5 products plus 6 dinner-scene tiles and 12 grove tiles as distractors. */
export async function catalogue(): Promise<Map<string, Buffer>> {
  const items = new Map<string, Buffer>();
  for (const [name, region] of Object.entries(PRODUCTS)) items.set(name, await crop(SHELF, region));
  for (const [name, image] of await tiles(DINNER, 3, 2, 'dinner')) items.set(name, image);
  for (const [name, image] of await tiles(GROVE, 4, 3, 'grove')) items.set(name, image);
  return items;
}

/** The product's region of the tote photo with `margin` of its surroundings on each side. */
export function inContext(region: Region, margin: number): Promise<Buffer> {
  const left = Math.max(0, region.left - margin);
  const top = Math.max(0, region.top - margin);
  return crop(SHELF, {
    left,
    top,
    width: Math.min(640 - left, region.width + 2 * margin + (region.left - margin - left)),
    height: Math.min(480 - top, region.height + 2 * margin + (region.top - margin - top)),
  });
}

export const VIEWS: Record<string, (image: Buffer) => Promise<Buffer>> = {
  'rotated 20°': (image) =>
    sharp(image).rotate(20, { background: '#ffffff' }).jpeg({ quality: 90 }).toBuffer(),
  'scaled to 60 %': async (image) => {
    const { width = 0 } = await sharp(image).metadata();
    return sharp(image)
      .resize(Math.round(width * 0.6))
      .jpeg({ quality: 90 })
      .toBuffer();
  },
  'cropped to the central 70 %': async (image) => {
    const { width = 0, height = 0 } = await sharp(image).metadata();
    return sharp(image)
      .extract({
        left: Math.round(width * 0.15),
        top: Math.round(height * 0.15),
        width: Math.round(width * 0.7),
        height: Math.round(height * 0.7),
      })
      .jpeg({ quality: 90 })
      .toBuffer();
  },
  'JPEG quality 20': (image) => sharp(image).jpeg({ quality: 20 }).toBuffer(),
  mirrored: (image) => sharp(image).flop().jpeg({ quality: 90 }).toBuffer(),
  'mirrored, rotated -10° and scaled up 1.5×': async (image) => {
    const { width = 0 } = await sharp(image).metadata();
    const rotated = await sharp(image).flop().rotate(-10, { background: '#808080' }).toBuffer();
    return sharp(rotated)
      .resize(Math.round(width * 1.5))
      .jpeg({ quality: 75 })
      .toBuffer();
  },
};

/** A flat grey image: nothing for a corner detector to find. */
export function flatImage(): Promise<Buffer> {
  return sharp({ create: { width: 400, height: 300, channels: 3, background: '#7a7a7a' } })
    .png()
    .toBuffer();
}
