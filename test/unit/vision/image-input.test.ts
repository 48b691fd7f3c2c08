import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import sharp, { type Sharp } from 'sharp';
import { describe, expect, it } from 'vitest';
import { InvalidImageError } from '#lib/domain/errors.ts';
import { SharpImageInspector } from '#lib/adapters/sharp-image-inspector.ts';
import {
  clampToPixels,
  CROP_MAX_SIDE,
  MAX_AVIF_PIXELS,
  MAX_CONCURRENT_SCALE_DOWNS,
  openImage,
  rgbLetterbox,
  rgbSquares,
  QUERY_MAX_SIDE,
  rgbToNormalisedBgrPlanes,
  scalingDown,
} from '#lib/vision/image-input.ts';
import { withScans } from '#test/support/jpeg-scans.ts';

const FIXTURES = join(import.meta.dirname, '../../fixtures/vision');

/** A width×height image whose left half is red and right half blue. */
async function halves(width: number, height: number): Promise<Sharp> {
  const blue = await sharp({
    create: { width: width / 2, height, channels: 3, background: { r: 0, g: 0, b: 255 } },
  })
    .png()
    .toBuffer();
  return sharp({ create: { width, height, channels: 3, background: { r: 255, g: 0, b: 0 } } }).composite([
    { input: blue, left: width / 2, top: 0 },
  ]);
}

function meanColour(rgb: Buffer): [number, number, number] {
  const sums = [0, 0, 0];
  for (let i = 0; i < rgb.length; i += 1) sums[i % 3]! += rgb[i]!;
  return sums.map((sum) => sum / (rgb.length / 3)) as [number, number, number];
}

describe('openImage', () => {
  it.each(['jpeg', 'png', 'webp', 'gif', 'avif', 'tiff'] as const)('accepts %s', async (format) => {
    const bytes = await sharp({ create: { width: 16, height: 8, channels: 3, background: 'green' } })
      .toFormat(format)
      .toBuffer();
    const { format: read, width, height } = await openImage(bytes);
    expect({ format: read, width, height }).toEqual({ format, width: 16, height: 8 });
  });

  it('reports the size after EXIF orientation (6 = rotate 90°, axes swapped)', async () => {
    const bytes = await (await halves(40, 20)).jpeg().withMetadata({ orientation: 6 }).toBuffer();
    const image = await openImage(bytes);
    expect([image.width, image.height]).toEqual([20, 40]);
  });

  it('names a format outside the allow-list, read or not by sharp, and lists the supported ones', async () => {
    // Prepare: SVG and HEIC (HEVC) sharp reads but we refuse; BMP (2×1 pixels), PDF and an AVIF image
    // sequence it cannot open
    const bmp = readFileSync(join(FIXTURES, 'bmp-2x1.bmp'));
    const svg = Buffer.from(
      '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg>',
    );
    const cases = [
      [bmp, 'bmp', 'BMP is not a supported image format'],
      [readFileSync(join(FIXTURES, 'heic-16x12.heic')), 'heic', 'HEIC/HEIF is not a supported image format'],
      [svg, 'svg', 'SVG is not a supported image format'],
      // One librsvg will not parse (an external entity) is named too, not called undecodable
      [
        Buffer.from(
          '<?xml version="1.0"?>\n<!DOCTYPE svg [<!ENTITY x SYSTEM "file:///etc/passwd">]>\n' +
            '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><text>&x;</text></svg>',
        ),
        'svg',
        'SVG is not a supported image format',
      ],
      // Its DOCTYPE's quoted literals and internal subset holding ']', '>' and '[' of their own
      [
        Buffer.from(
          '<?xml version="1.0"?>\n<!DOCTYPE svg SYSTEM "a[1].dtd" [<!ENTITY y "]>"><!-- ] --><?p ]>?>' +
            '<!ENTITY x SYSTEM "file:///etc/passwd">]>\n' +
            '<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><text>&x;</text></svg>',
        ),
        'svg',
        'SVG is not a supported image format',
      ],
      // A prefixed root (librsvg reads `<svg:svg xmlns:svg="…">` as SVG), the prefix bound in single quotes,
      // after an attribute whose value holds a '>'
      ...['"', "'"].map(
        (quote) =>
          [
            Buffer.from(
              '<!DOCTYPE svg:svg [<!ENTITY x SYSTEM "file:///etc/passwd">]>\n<svg:svg width="10" title="a > b" ' +
                `xmlns:svg=${quote}http://www.w3.org/2000/svg${quote}><svg:text>&x;</svg:text></svg:svg>`,
            ),
            'svg',
            'SVG is not a supported image format',
          ] as const,
      ),
      [Buffer.from('%PDF-1.7\n%âãÏÓ\n1 0 obj'), 'pdf', 'PDF is not a supported image format'],
      [
        readFileSync(join(FIXTURES, 'avif-sequence-red-blue.avif')),
        'avif-sequence',
        'an animated AVIF (an AVIF image sequence) is not supported; send a still image',
      ],
    ] as const;
    for (const [bytes, format, problem] of cases) {
      // Act
      const refusal = await openImage(bytes).then(
        () => undefined,
        (error: unknown) => error,
      );
      // Assess
      expect(refusal, format).toBeInstanceOf(InvalidImageError);
      expect((refusal as InvalidImageError).refusal).toEqual({
        reason: 'unsupported_format',
        format,
        problem: expect.stringContaining(problem),
      });
      expect((refusal as InvalidImageError).message).toMatch(/JPEG, PNG, WebP, GIF, AVIF, TIFF\)\.$/);
    }
  });

  it('refuses bytes that are not an image, and empty input, saying which', async () => {
    // Text that starts like a BMP is no BMP
    for (const text of ['definitely not an image', 'BMW parts catalogue, page 1 of 12']) {
      await expect(openImage(Buffer.from(text))).rejects.toMatchObject({
        refusal: { reason: 'undecodable' },
        message:
          'Invalid image: the data is not a decodable image (supported: JPEG, PNG, WebP, GIF, AVIF, TIFF).',
      });
    }
    // An `svg` root of another namespace is no SVG (librsvg does not read it), nor a prefix bound to SVG's
    // namespace only in an attribute's text
    for (const tag of [
      '<foo:svg xmlns:foo="http://example.com/not-svg" width="10">',
      '<foo:svg title=" xmlns:foo=\'http://www.w3.org/2000/svg\'" width="10">',
    ]) {
      await expect(openImage(Buffer.from(`${tag}<foo:text>&x;</foo:text></foo:svg>`))).rejects.toMatchObject({
        refusal: { reason: 'undecodable' },
      });
    }
    await expect(openImage(Buffer.alloc(0))).rejects.toMatchObject({ refusal: { reason: 'empty' } });
  });

  it('reads an animated GIF or WebP as its first frame', async () => {
    // Prepare: two 8×8 frames, red then blue, as one raw strip of pages
    const strip = Buffer.alloc(8 * 16 * 3);
    for (let pixel = 0; pixel < 8 * 16; pixel += 1) strip[pixel * 3 + (pixel < 64 ? 0 : 2)] = 255;
    const frames = () => sharp(strip, { raw: { width: 8, height: 16, channels: 3, pageHeight: 8 } });
    for (const bytes of [
      await frames()
        .gif({ delay: [100, 100] })
        .toBuffer(),
      await frames()
        .webp({ delay: [100, 100], lossless: true })
        .toBuffer(),
    ]) {
      expect((await sharp(bytes).metadata()).pages).toBe(2);
      // Act
      const image = await openImage(bytes);
      const [rgb] = await rgbSquares(image, 4, [undefined]);
      // Assess: one frame's size, the first frame's colour
      expect([image.width, image.height]).toEqual([8, 8]);
      expect(meanColour(rgb!)[0]).toBeGreaterThan(240);
      expect(meanColour(rgb!)[2]).toBeLessThan(15);
    }
  });

  it('refuses an AVIF over 4096×4096 pixels from its header, and accepts one of 4096×4096', async () => {
    // Prepare: one colour, a few hundred bytes each
    const avif = (width: number, height: number) =>
      sharp({ create: { width, height, channels: 3, background: '#888' } })
        .avif({ effort: 0 })
        .toBuffer();
    const [over, at] = [await avif(4097, 4096), await avif(4096, 4096)];
    expect(4096 * 4096).toBe(MAX_AVIF_PIXELS);
    // Act / Assess: the inspector (the use cases' first check) and openImage (every model's input) agree
    const inspector = new SharpImageInspector(40_000_000);
    for (const read of [(bytes: Buffer) => inspector.inspect(bytes), openImage]) {
      await expect(read(over)).rejects.toMatchObject({
        refusal: {
          reason: 'too_many_pixels',
          format: 'avif',
          problem:
            'an AVIF of 4097x4096 pixels exceeds the AVIF limit of 16.8 megapixels (4096x4096): send it smaller, or as JPEG',
        },
      });
      await expect(read(at)).resolves.toMatchObject({ format: 'avif', width: 4096, height: 4096 });
    }
    // Other formats keep the general limit
    const png = await sharp({ create: { width: 4097, height: 4096, channels: 3, background: '#888' } })
      .png()
      .toBuffer();
    await expect(openImage(png)).resolves.toMatchObject({ width: 4097 });
  });

  it('counts the pixels an AVIF codes, not the size a crop box or a grid declares', async () => {
    // Prepare: 8200×4000 coded pixels shown as 64×64, by a crop box (clap) and by a grid of two tiles
    // (code review's files, avifenc 0.11.1); a grid at the limit; a plain 100×100 AVIF under a `mif1` brand
    const fixture = (name: string) => readFileSync(join(FIXTURES, name));
    const grid = await sharp({ create: { width: 4096, height: 4096, channels: 4, background: '#8888' } })
      .avif({ effort: 0 })
      .toBuffer();
    const mif1 = Buffer.from(fixture('avif-100x100.avif'));
    mif1.write('mif1', 8, 'latin1');
    // Act / Assess
    for (const name of ['avif-cropped-8200x4000-shown-64x64.avif', 'avif-grid-8200x4000-shown-64x64.avif']) {
      await expect(openImage(fixture(name)), name).rejects.toMatchObject({
        refusal: {
          reason: 'too_many_pixels',
          format: 'avif',
          problem: expect.stringMatching(/^an AVIF coding 32\.8 megapixels exceeds the AVIF limit/),
        },
      });
    }
    await expect(openImage(grid)).resolves.toMatchObject({ format: 'avif', width: 4096 });
    await expect(openImage(mif1)).resolves.toMatchObject({ format: 'avif', width: 100 });
  });

  it("counts a grid's canvas: a legit grid passes, one whose canvas outgrows its ispe does not", async () => {
    // Prepare: avifenc's 2×2 grid (2048×1536), and the same with its canvas patched to 8192×8192
    const grid = readFileSync(join(FIXTURES, 'avif-grid-2048x1536-2x2.avif'));
    const canvas = grid.indexOf(Buffer.from([0, 0, 1, 1, 0x08, 0x00, 0x06, 0x00])); // 2×2, 2048×1536
    const patched = Buffer.from(grid);
    patched.writeUInt16BE(8192, canvas + 4);
    patched.writeUInt16BE(8192, canvas + 6);
    // Act / Assess: the grid decodes; the patched one, shown as 2048×1536, is refused from its header
    await expect(openImage(grid)).resolves.toMatchObject({ format: 'avif', width: 2048, height: 1536 });
    await expect(openImage(patched)).rejects.toMatchObject({
      refusal: {
        reason: 'too_many_pixels',
        format: 'avif',
        problem: expect.stringMatching(/^an AVIF coding 67\.1 megapixels exceeds the AVIF limit/),
      },
    });
    expect((await sharp(patched).metadata()).width).toBe(2048);
  });

  it('counts a grid with alpha at its size: the alpha grid (avifenc 0.11.1) is not counted again', async () => {
    // Prepare: a 4096×4096 grid of four tiles, its alpha a grid of four tiles of the same size
    const grid = readFileSync(join(FIXTURES, 'avif-grid-alpha-4096x4096-2x2.avif'));
    expect(await sharp(grid).metadata()).toMatchObject({ width: 4096, height: 4096, hasAlpha: true });
    // Act / Assess: counted with its alpha's tiles, it was refused as coding 33.6 megapixels
    await expect(openImage(grid)).resolves.toMatchObject({ format: 'avif', width: 4096, height: 4096 });
  });

  it('counts the frame size the AV1 bitstream codes, not a smaller ispe', async () => {
    // Prepare: a 4097×4096 AVIF whose ispe is patched down to 64×64 (its sequence header codes 4097×4096)
    const avif = await sharp({ create: { width: 4097, height: 4096, channels: 3, background: '#888' } })
      .avif({ effort: 0 })
      .toBuffer();
    const at = avif.indexOf('ispe', 0, 'latin1');
    avif.writeUInt32BE(64, at + 8);
    avif.writeUInt32BE(64, at + 12);
    // Act / Assess: shown as 64×64, refused from the bitstream's size
    await expect(openImage(avif)).rejects.toMatchObject({
      refusal: {
        reason: 'too_many_pixels',
        format: 'avif',
        problem: expect.stringMatching(/^an AVIF coding 16\.8 megapixels exceeds the AVIF limit/),
      },
    });
    expect((await sharp(avif).metadata()).width).toBe(64);
  });

  it('refuses a decompression bomb (over 40 megapixels) from its header alone', async () => {
    // 7,000 × 7,000 of one colour compresses to a few kB but would decode to 147 MB.
    const bomb = await sharp({ create: { width: 7000, height: 7000, channels: 3, background: 'white' } })
      .png({ compressionLevel: 9 })
      .toBuffer();
    expect(bomb.length).toBeLessThan(1_000_000);
    await expect(openImage(bomb)).rejects.toThrow(/7000x7000 pixels exceeds the limit of 40 megapixels/);
  });

  it('refuses a side over 16,384 pixels under the pixel limit, and a JPEG of over 100 scans, from the header', async () => {
    // Prepare: strips of one colour (a few hundred bytes each) and a JPEG whose one scan is repeated
    const strip = (width: number, height: number) =>
      sharp({ create: { width, height, channels: 3, background: 'white' } })
        .png()
        .toBuffer();
    const jpeg = await (await halves(64, 64)).jpeg().toBuffer();
    const scans = (n: number) => withScans(jpeg, n);
    // Act / Assess
    await expect(openImage(await strip(16_385, 1))).rejects.toThrow(/16384 pixels per side/);
    await expect(openImage(await strip(1, 16_385))).rejects.toThrow(InvalidImageError);
    await expect(openImage(await strip(16_384, 1))).resolves.toMatchObject({ width: 16_384, height: 1 });
    await expect(openImage(scans(101))).rejects.toThrow(/more than 100 scans/);
    await expect(openImage(scans(100))).resolves.toMatchObject({ width: 64, height: 64 });
  });

  it('refuses a truncated JPEG when its pixels are decoded', async () => {
    const jpeg = await (await halves(64, 64)).jpeg().toBuffer();
    const truncated = jpeg.subarray(0, Math.floor(jpeg.length / 2));
    await expect(openImage(truncated).then((image) => rgbSquares(image, 8, [undefined]))).rejects.toThrow(
      InvalidImageError,
    );
  });
});

describe('rgbSquares', () => {
  it('flattens transparency onto white', async () => {
    const transparent = await sharp({
      create: { width: 10, height: 10, channels: 4, background: { r: 0, g: 0, b: 0, alpha: 0 } },
    })
      .png()
      .toBuffer();
    const [rgb] = await rgbSquares(await openImage(transparent), 4, [undefined]);
    expect(rgb!.length).toBe(4 * 4 * 3);
    expect(Math.min(...rgb!)).toBe(255);
  });

  it('cuts regions in the EXIF-oriented frame', async () => {
    // Prepare: stored 40×20 red|blue with orientation 6 → shown 20×40, red on top, blue below.
    const bytes = await (await halves(40, 20)).png().withMetadata({ orientation: 6 }).toBuffer();
    const image = await openImage(bytes);

    // Act
    const [top, bottom] = await rgbSquares(image, 4, [
      [0, 0, 20, 18],
      [0, 22, 20, 40],
    ]);

    // Assess
    expect(meanColour(top!)[0]).toBeGreaterThan(240);
    expect(meanColour(top!)[2]).toBeLessThan(15);
    expect(meanColour(bottom!)[2]).toBeGreaterThan(240);
    expect(meanColour(bottom!)[0]).toBeLessThan(15);
  });
});

describe('SharpImageInspector crops and bounded query', () => {
  const inspector = new SharpImageInspector(40_000_000);

  it('refuses as openImage does, within the configured pixel limit, naming no field (the use case does)', async () => {
    // Prepare: 3000 × 2000 of one colour
    const png = await sharp({ create: { width: 3000, height: 2000, channels: 3, background: '#fff' } })
      .png()
      .toBuffer();
    // Act
    const refusal = await new SharpImageInspector(5_000_000).inspect(png).catch((error: unknown) => error);
    // Assess
    expect(refusal).toMatchObject({
      message: 'Invalid image: an image of 3000x2000 pixels exceeds the limit of 5 megapixels.',
      details: [],
      refusal: { reason: 'too_many_pixels', format: 'png' },
    });
    expect((refusal as InvalidImageError).forField('fallback')).toMatchObject({
      message: 'Invalid fallback: an image of 3000x2000 pixels exceeds the limit of 5 megapixels.',
      details: [
        {
          path: 'fallback',
          message: 'an image of 3000x2000 pixels exceeds the limit of 5 megapixels',
          reason: 'too_many_pixels',
          format: 'png',
        },
      ],
    });
    await expect(inspector.inspect(png)).resolves.toEqual({ format: 'png', width: 3000, height: 2000 });
  });

  /** Mean colour and size of an encoded image. */
  async function look(bytes: Buffer) {
    const { data, info } = await sharp(bytes).removeAlpha().raw().toBuffer({ resolveWithObject: true });
    return {
      colour: meanColour(data),
      width: info.width,
      height: info.height,
      format: (await sharp(bytes).metadata()).format,
    };
  }

  it('cuts every box from one oriented image, none larger than the models read', async () => {
    // Prepare: stored 3000×1400 red|blue with orientation 6 → shown 1400×3000, red on top, blue below
    const bytes = await (await halves(3000, 1400)).jpeg().withMetadata({ orientation: 6 }).toBuffer();
    // Act
    const [top, bottom, whole] = await inspector.crops(bytes, [
      [0, 0, 1400, 1400],
      [100, 1700, 300, 1800],
      [0, 0, 1400, 3000],
    ]);
    // Assess: in the frame the client sees; a small box at its own size, a large one scaled down
    const [a, b, c] = [await look(top!), await look(bottom!), await look(whole!)];
    expect(a.colour[0]).toBeGreaterThan(240);
    expect(b.colour[2]).toBeGreaterThan(240);
    expect([b.width, b.height]).toEqual([200, 100]);
    expect([a.width, a.height]).toEqual([CROP_MAX_SIDE, CROP_MAX_SIDE]);
    expect(Math.max(c.width, c.height)).toBe(CROP_MAX_SIDE);
    expect(await inspector.crops(bytes, [])).toEqual([]);
  });

  it('reports an image it cannot decode in full as an invalid image (a 500 when each crop decoded it)', async () => {
    const jpeg = await (await halves(640, 480)).jpeg().toBuffer();
    const truncated = jpeg.subarray(0, Math.floor(jpeg.length * 0.6));
    await expect(inspector.crops(truncated, [[0, 0, 10, 10]])).rejects.toThrow(InvalidImageError);
  });

  it('cuts the boxes of a JPEG with damaged scan data from a reduced decode, as the search stages read it', async () => {
    // Prepare: 800×600 of graded noise whose scan data has 179 bytes overwritten half way: libjpeg
    // reports it at full size and at half, not at a quarter (where the search stages read such a photo)
    const [width, height] = [800, 600];
    const pixels = Buffer.alloc(width * height * 3);
    for (let i = 0, x = 1; i < pixels.length; i += 1) {
      x = (Math.imul(x, 1103515245) + 12345) >>> 0;
      pixels[i] = ((i % (width * 3)) / 12 + (x >>> 28)) & 255;
    }
    const jpeg = await sharp(pixels, { raw: { width, height, channels: 3 } })
      .jpeg({ quality: 85 })
      .toBuffer();
    const damaged = Buffer.from(jpeg).fill(0xb8, jpeg.length >> 1, (jpeg.length >> 1) + 179);
    await expect(sharp(damaged).raw().toBuffer()).rejects.toThrow(/Corrupt JPEG/);
    // Act
    const crops = await inspector.crops(damaged, [
      [0, 0, 400, 300],
      [200, 300, 800, 600],
    ]);
    // Assess: each box's region at the quarter decode's scale
    expect(
      await Promise.all(crops.map(async (crop) => [(await look(crop)).width, (await look(crop)).height])),
    ).toEqual([
      [100, 75],
      [150, 75],
    ]);
    // The colours where the box says, above the damage (the left of the gradient is darker than the right)
    const [left, right] = await Promise.all(
      (
        await inspector.crops(damaged, [
          [0, 0, 100, 200],
          [700, 0, 800, 200],
        ])
      ).map(async (crop) => (await look(crop)).colour[0]),
    );
    expect(right! - left!).toBeGreaterThan(100);
  });

  it('hands the search stages a large query scaled down once, oriented, and a small one as it is', async () => {
    const small = await (await halves(1200, 800)).png().toBuffer();
    const same = await inspector.bounded(small);
    expect(same.bytes).toBe(small);
    expect([same.width, same.height]).toEqual([1200, 800]);
    // A JPEG, however large: each stage decodes it reduced already
    const jpeg = await (await halves(6000, 2000)).jpeg().toBuffer();
    expect((await inspector.bounded(jpeg)).bytes).toBe(jpeg);
    // Stored 6000×2000 with orientation 6 → shown 2000×6000, red on top
    const large = await (await halves(6000, 2000)).png().withMetadata({ orientation: 6 }).toBuffer();
    const bounded = await inspector.bounded(large);
    const seen = await look(bounded.bytes);
    expect([bounded.width, bounded.height]).toEqual([Math.round(QUERY_MAX_SIDE / 3), QUERY_MAX_SIDE]);
    expect([seen.width, seen.height, seen.format]).toEqual([bounded.width, bounded.height, 'tiff']);
    const { data } = await sharp(bounded.bytes)
      .extract({ left: 0, top: 0, width: bounded.width, height: 100 })
      .raw()
      .toBuffer({ resolveWithObject: true });
    expect(meanColour(data)[0]).toBeGreaterThan(240);
    // No orientation left for the stages to apply again
    expect((await sharp(bounded.bytes).metadata()).orientation ?? 1).toBe(1);
    // A small AVIF, which no stage can decode reduced: decoded once, at its own size
    const avif = await (await halves(1200, 800)).avif({ effort: 0 }).toBuffer();
    const once = await inspector.bounded(avif);
    expect([once.width, once.height, (await look(once.bytes)).format]).toEqual([1200, 800, 'tiff']);
  });

  it('scales down at most two large queries at once, the others waiting their turn', async () => {
    // Prepare: five large PNGs at once; the gate is watched while they are scaled down
    const large = await (await halves(4000, 3000)).png({ compressionLevel: 1 }).toBuffer();
    let most = 0;
    let queued = 0;
    const watch = setInterval(() => {
      most = Math.max(most, scalingDown.running);
      queued = Math.max(queued, scalingDown.waiting);
    }, 1);
    // Act
    const bounded = await Promise.all(Array.from({ length: 5 }, () => inspector.bounded(large))).finally(() =>
      clearInterval(watch),
    );
    // Assess
    expect(bounded.map(({ width }) => width)).toEqual(Array(5).fill(QUERY_MAX_SIDE));
    expect(most).toBe(MAX_CONCURRENT_SCALE_DOWNS);
    expect(queued).toBeGreaterThan(0);
    expect([scalingDown.running, scalingDown.waiting]).toEqual([0, 0]);
  });
});

/**
 * An uncompressed 8-bit TIFF of `width`×`height` whose pixels are `base` (1 grey or 3 RGB) bands of
 * `colour` and `extra` more samples (type 0, unspecified; the first one 255), written by hand: sharp
 * writes at most four bands.
 */
function tiffWithExtraSamples(width: number, height: number, colour: number[], extra: number): Buffer {
  const base = colour.length;
  const bands = base + extra;
  const pixels = Buffer.alloc(width * height * bands);
  for (let i = 0; i < width * height; i += 1) {
    colour.forEach((value, band) => (pixels[i * bands + band] = value));
    for (let e = 0; e < extra; e += 1) pixels[i * bands + base + e] = e === 0 ? 255 : 40 * e;
  }
  const entries: [number, number, number, number][] = [];
  const bitsAt = 8;
  const extrasAt = bitsAt + 2 * bands;
  const dataAt = extrasAt + 2 * extra;
  const ifdAt = dataAt + pixels.length + ((dataAt + pixels.length) % 2);
  entries.push([256, 4, 1, width], [257, 4, 1, height], [258, 3, bands, bitsAt], [259, 3, 1, 1]);
  entries.push([262, 3, 1, base === 1 ? 1 : 2], [273, 4, 1, dataAt], [277, 3, 1, bands]);
  entries.push([278, 4, 1, height], [279, 4, 1, pixels.length], [284, 3, 1, 1], [338, 3, extra, extrasAt]);
  const tiff = Buffer.alloc(ifdAt + 2 + 12 * entries.length + 4);
  tiff.write('II', 0);
  tiff.writeUInt16LE(42, 2);
  tiff.writeUInt32LE(ifdAt, 4);
  for (let band = 0; band < bands; band += 1) tiff.writeUInt16LE(8, bitsAt + 2 * band);
  pixels.copy(tiff, dataAt);
  tiff.writeUInt16LE(entries.length, ifdAt);
  entries.forEach(([tag, type, count, value], i) => {
    const at = ifdAt + 2 + 12 * i;
    tiff.writeUInt16LE(tag, at);
    tiff.writeUInt16LE(type, at + 2);
    tiff.writeUInt32LE(count, at + 4);
    // Offsets of the arrays (more than 4 bytes), or a value in place: ExtraSamples' zeros need neither.
    if (tag === 338 && count <= 2) tiff.writeUInt32LE(0, at + 8);
    else tiff.writeUInt32LE(value, at + 8);
  });
  return tiff;
}

describe('openImage with extra samples', () => {
  it.each([
    ['RGB with two extra samples', [200, 40, 10]],
    ['grey with three extra samples', [90]],
  ])('reads the colours of %s and not the extra bands', async (_name, colour) => {
    const bytes = tiffWithExtraSamples(8, 6, colour, colour.length === 1 ? 3 : 2);
    expect((await sharp(bytes).metadata()).channels).toBe(colour.length === 1 ? 4 : 5);
    const [rgb] = await rgbSquares(await openImage(bytes), 4, [undefined]);
    const expected = colour.length === 1 ? [90, 90, 90] : colour;
    meanColour(rgb!).forEach((value, band) => expect(Math.abs(value - expected[band]!)).toBeLessThan(2));
  });
});

describe('rgbLetterbox', () => {
  it('keeps the aspect ratio, pads right and bottom, and reports the scale back to image pixels', async () => {
    const bytes = await (await halves(200, 100)).png().toBuffer();
    const { rgb, scaleX, scaleY } = await rgbLetterbox(await openImage(bytes), 40, { r: 1, g: 2, b: 3 });
    expect(rgb.length).toBe(40 * 40 * 3);
    expect(scaleX).toBeCloseTo(5, 10);
    expect(scaleY).toBeCloseTo(5, 10);
    const pixel = (x: number, y: number): number[] =>
      Array.from(rgb.subarray((y * 40 + x) * 3, (y * 40 + x) * 3 + 3));
    expect(pixel(5, 5)).toEqual([255, 0, 0]);
    expect(pixel(35, 5)).toEqual([0, 0, 255]);
    expect(pixel(5, 30)).toEqual([1, 2, 3]);
  });
});

describe('rgbToNormalisedBgrPlanes', () => {
  it('writes planar BGR normalised per channel', () => {
    const rgb = Buffer.from([10, 20, 30, 40, 50, 60]);
    const planes = rgbToNormalisedBgrPlanes(rgb, [30, 20, 10], [1, 2, 10]);
    expect(Array.from(planes)).toEqual([0, 30, 0, 15, 0, 3]);
  });
});

describe('clampToPixels', () => {
  it('covers fractional boxes and stays inside the image', () => {
    expect(clampToPixels([-5.5, 2.2, 10.1, 300], 50, 40)).toEqual({ left: 0, top: 2, width: 11, height: 38 });
    expect(clampToPixels([60, 60, 70, 70], 50, 40)).toEqual({ left: 49, top: 39, width: 1, height: 1 });
  });
});
