/**
 * Geometric verification on real photos, through OpenCV's wasm ORB: product crops from a tote photo form
 * the catalogue together with tiles of two unrelated photos; queries are transformed views of a product,
 * alone or in its surroundings.
 */
import { createHash } from 'node:crypto';
import sharp from 'sharp';
import { InvalidImageError } from '#lib/domain/errors.ts';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  CATALOGUE_FEATURES_VERSION,
  decodeFeatures,
  encodeFeatures,
  extractLocalFeatures,
  loadOpenCv,
  rerankCandidates,
  verifyCandidates,
  type LocalFeatures,
} from '#lib/vision/local-features/index.ts';
import { catalogue, crop, DINNER, flatImage, GROVE, inContext, PRODUCTS, SHELF, VIEWS } from './images.ts';

let names: string[];
let items: LocalFeatures[];

beforeAll(async () => {
  const images = await catalogue();
  names = [...images.keys()];
  items = [];
  for (const image of images.values()) items.push(await extractLocalFeatures(image, { role: 'catalogue' }));
});

function inliersOf(features: LocalFeatures, name: string): Promise<number> {
  return Promise.resolve(verifyCandidates(features, [items[names.indexOf(name)]])[0]!.inliers);
}

describe('loadOpenCv', () => {
  it('shares one module between concurrent callers and can be awaited', async () => {
    // Act
    const [a, b] = await Promise.all([loadOpenCv(), loadOpenCv()]);
    // Assess
    expect(a).toBe(b);
    expect(typeof a.ORB).toBe('function');
  });
});

/**
 * sha256 of `encodeFeatures` of each committed photo, and of the dinner photo at 1000 px (a query brought
 * down to 640 px before ORB takes its own raster path). OpenCV 5.0's wasm build (byte-identical to the
 * @techstark/opencv-js 4.12 build the first records came from), sharp 0.35.5.
 *
 * Catalogue features are stored, and only extracted again when a product's recipe version differs from
 * `CATALOGUE_FEATURES_VERSION`; so the catalogue records are keyed by that version and a record never
 * changes: when an upgrade (OpenCV, sharp/libvips, another resize kernel or ORB setting) changes them,
 * the new ones go under a new version, which re-extracts each feed at its next import. Query features
 * are not stored: a change there only needs new query records (and a look at the quality it measures).
 */
const CATALOGUE_FINGERPRINTS: Record<number, Record<string, string>> = {
  // FAST threshold 20, 500 keypoints per orientation.
  1: {
    dinner: '115154d1ee7d08bfc89cdf9940656342ede21fc797a76395d5d42b1a77765f41',
    grove: '86fc8df726ac61e0bce8baa4f10bd9c6fbc52b7c6877df4fffe63610978e1948',
    shelf: '1fa26648bf83e4314b357f1efe236f1469a28db28b2cd68258edb49ba55d03cf',
  },
  // FAST threshold 7, 800 keypoints per orientation.
  2: {
    dinner: '083bf2ddad90a86dc46a4d537d9e57b813af6c21b8d4f6bb89be0e004722fc35',
    grove: '68d73d46ae224e02879b45f15469ab229f260ad467e398b642192c987d41e781',
    shelf: '662b85c4bd055126d692946488d7796898d1f8ea2e9d1f3384b731ff3f630a2a',
    dinner1000: 'ad954141174ea955c41e2c78e6de8f72927ceddf7cc0e2489e4cdffa35ffdd12',
  },
};
const QUERY_FINGERPRINTS = {
  dinner: 'fa89cb377270e13feff0daa1982f67e11c493a4ae250f20bdd5e1187b3a0ae49',
  grove: '906e145b20dc6af47fadfab801b172644df88d4dab970e89dcc098a376b2d54d',
  shelf: 'b8282a813419ae11383857d496e33aa2d44b24f7f62f73ba1b20a5c857aa7a95',
  dinner1000: '86206fc6ae4eb1395b7fa2f0423f836b7b4b33f975924ef8de4d871d98021ad8',
};

describe('extraction stability', () => {
  it('extracts the features the stored catalogue records were made with, bit for bit', async () => {
    // Prepare
    const dinner1000 = await sharp(DINNER).resize(1000).jpeg({ quality: 90 }).toBuffer();
    const photos = { dinner: DINNER, grove: GROVE, shelf: SHELF, dinner1000 };
    const fingerprints = { catalogue: {} as Record<string, string>, query: {} as Record<string, string> };
    // Act
    for (const [name, photo] of Object.entries(photos))
      for (const role of ['catalogue', 'query'] as const) {
        const features = await extractLocalFeatures(photo, { role });
        fingerprints[role][name] = createHash('sha256').update(encodeFeatures(features)).digest('hex');
      }
    // Assess
    expect(fingerprints, `sharp ${sharp.versions.sharp}, libvips ${sharp.versions.vips}`).toEqual({
      catalogue: CATALOGUE_FINGERPRINTS[CATALOGUE_FEATURES_VERSION],
      query: QUERY_FINGERPRINTS,
    });
  });
});

describe('extractLocalFeatures', () => {
  it('extracts up to 800 keypoints per orientation from a catalogue image brought up to 256 px', async () => {
    // Prepare: the book is 124×150 in the tote photo
    const book = await crop(SHELF, PRODUCTS.book);
    // Act
    const features = await extractLocalFeatures(book, { role: 'catalogue' });
    // Assess
    expect(features.original.width).toBe(256);
    expect(features.original.height).toBe(310);
    expect(features.mirrored).toBeDefined();
    for (const set of [features.original, features.mirrored!]) {
      expect(set.points.length / 2).toBeGreaterThan(500);
      expect(set.points.length / 2).toBeLessThanOrEqual(800);
      expect(set.descriptors.length).toBe((set.points.length / 2) * 8);
    }
  });

  it('bounds a query to 640 px and does not mirror it', async () => {
    // Prepare
    const photo = await sharp(DINNER).resize(1600).jpeg().toBuffer();
    // Act
    const features = await extractLocalFeatures(photo, { role: 'query' });
    // Assess
    expect([features.original.width, features.original.height]).toEqual([640, 480]);
    expect(features.mirrored).toBeUndefined();
  });

  it('extracts a region of a photo as the image of that region, brought up to 256 px', async () => {
    // Prepare: the book's box in the tote photo, and the same pixels cut out beforehand
    const { left, top, width, height } = PRODUCTS.book;
    const cut = await crop(SHELF, PRODUCTS.book);
    // Act
    const region = await extractLocalFeatures(SHELF, {
      role: 'query',
      region: [left, top, left + width, top + height],
    });
    const ofCut = await extractLocalFeatures(cut, { role: 'query' });
    const clipped = await extractLocalFeatures(SHELF, { role: 'query', region: [-50, -20, 100, 80] });
    // Assess: 124 × 150 brought up to a 256-px short side; a box past the edge is clipped to it
    expect([region.original.width, region.original.height]).toEqual([256, 310]);
    expect(region.original.points).toEqual(ofCut.original.points);
    expect([clipped.original.width, clipped.original.height]).toEqual([320, 256]);
    expect(await inliersOf(region, 'book')).toBeGreaterThanOrEqual(20);
  });

  it('gives no features for a region outside the photo, and reads regions after EXIF orientation', async () => {
    // Prepare: the tote photo stored rotated, with EXIF orientation 6 ("rotate 90° clockwise to view")
    const stored = await sharp(SHELF)
      .rotate(-90)
      .withMetadata({ orientation: 6 })
      .jpeg({ quality: 95 })
      .toBuffer();
    const { left, top, width, height } = PRODUCTS.book;
    const box: [number, number, number, number] = [left, top, left + width, top + height];
    // Act
    const outside = await extractLocalFeatures(SHELF, { role: 'query', region: [700, 500, 900, 700] });
    const oriented = await extractLocalFeatures(stored, { role: 'query', region: box });
    // Assess: the book's box in the oriented frame still shows the book
    expect(outside.original.points).toHaveLength(0);
    expect([oriented.original.width, oriented.original.height]).toEqual([256, 310]);
    expect(await inliersOf(oriented, 'book')).toBeGreaterThanOrEqual(20);
  });

  it('refuses bytes that are not an image with InvalidImageError', async () => {
    // Act / Assess
    await expect(extractLocalFeatures(Buffer.from('not an image at all'), { role: 'query' })).rejects.toThrow(
      InvalidImageError,
    );
  });

  it('gives the same features to concurrent calls as to sequential ones', async () => {
    // Prepare
    const images = await Promise.all(Object.values(PRODUCTS).map((region) => crop(SHELF, region)));
    const sequential: Buffer[] = [];
    for (const image of images)
      sequential.push(encodeFeatures(await extractLocalFeatures(image, { role: 'catalogue' })));
    // Act
    const concurrent = await Promise.all(
      images.map((image) => extractLocalFeatures(image, { role: 'catalogue' })),
    );
    // Assess
    expect(concurrent.map(encodeFeatures)).toEqual(sequential);
  });

  it('yields no features for a flat image, and verification of it finds nothing', async () => {
    // Act
    const features = await extractLocalFeatures(await flatImage(), { role: 'catalogue' });
    // Assess
    expect(features.original.points).toHaveLength(0);
    expect(features.mirrored!.descriptors).toHaveLength(0);
    expect(verifyCandidates(features, items.slice(0, 3))).toEqual([
      { inliers: 0, matched: 0, mirrored: false },
      { inliers: 0, matched: 0, mirrored: false },
      { inliers: 0, matched: 0, mirrored: false },
    ]);
    expect(verifyCandidates(items[0]!, [features])[0]!.inliers).toBe(0);
  });

  it('yields no features for a strip thinner than ORB borders, where OpenCV would abort', async () => {
    // Prepare: a textured 10,000 × 1 strip (brought to 1024 × 1) and its transpose
    const stripe = Buffer.from(Array.from({ length: 10_000 * 3 }, (_, i) => (i * 37) % 256));
    const wide = await sharp(stripe, { raw: { width: 10_000, height: 1, channels: 3 } })
      .png()
      .toBuffer();
    const tall = await sharp(stripe, { raw: { width: 1, height: 10_000, channels: 3 } })
      .png()
      .toBuffer();
    // Act
    const fromWide = await extractLocalFeatures(wide, { role: 'catalogue' });
    const fromTall = await extractLocalFeatures(tall, { role: 'query' });
    // Assess: empty sets of the raster's size, and OpenCV still works afterwards
    expect([fromWide.original.width, fromWide.original.height]).toEqual([1024, 1]);
    expect(fromWide.original.points).toHaveLength(0);
    expect(fromWide.mirrored!.points).toHaveLength(0);
    expect([fromTall.original.width, fromTall.original.height]).toEqual([1, 1024]);
    expect(fromTall.original.descriptors).toHaveLength(0);
    const after = await extractLocalFeatures(SHELF, { role: 'query' });
    expect(after.original.points.length).toBeGreaterThan(100);
  });

  it('is deterministic: the same image gives identical features and inlier counts', async () => {
    // Prepare
    const query = await VIEWS['rotated 20°']!(await inContext(PRODUCTS.towels, 30));
    // Act
    const first = await extractLocalFeatures(query, { role: 'query' });
    const second = await extractLocalFeatures(query, { role: 'query' });
    // Assess
    expect(encodeFeatures(second)).toEqual(encodeFeatures(first));
    expect(verifyCandidates(second, items)).toEqual(verifyCandidates(first, items));
  });

  it('round-trips real features through the binary format without changing verification', async () => {
    // Prepare
    const book = items[names.indexOf('book')]!;
    const query = await extractLocalFeatures(await VIEWS['mirrored']!(await inContext(PRODUCTS.book, 30)), {
      role: 'query',
    });
    // Act
    const stored = decodeFeatures(encodeFeatures(book));
    // Assess
    expect(stored).toEqual(book);
    expect(verifyCandidates(query, [stored])).toEqual(verifyCandidates(query, [book]));
  });
});

describe('verifyCandidates', () => {
  for (const product of ['book', 'towels'] as const) {
    for (const [view, make] of Object.entries(VIEWS)) {
      it(`matches the ${product} ${view} with at least 20 inliers`, async () => {
        // Prepare
        const query = await extractLocalFeatures(await make(await crop(SHELF, PRODUCTS[product])), {
          role: 'query',
        });
        // Act
        const inliers = await inliersOf(query, product);
        // Assess
        expect(inliers).toBeGreaterThanOrEqual(20);
      });
    }
  }

  it('reports a mirrored view as mirrored', async () => {
    // Prepare
    const query = await extractLocalFeatures(await VIEWS['mirrored']!(await inContext(PRODUCTS.soap, 30)), {
      role: 'query',
    });
    // Act
    const [result] = verifyCandidates(query, [items[names.indexOf('soap')]]);
    // Assess
    expect(result!.mirrored).toBe(true);
    expect(result!.inliers).toBeGreaterThanOrEqual(20);
  });

  it('matches a flipped view through a mirrored query when the item was stored without its mirror', async () => {
    // Prepare
    const book = await crop(SHELF, PRODUCTS.book);
    const stored = await extractLocalFeatures(book, { role: 'catalogue', mirror: false });
    const flipped = await VIEWS['mirrored']!(book);
    // Act
    const [plain] = verifyCandidates(await extractLocalFeatures(flipped, { role: 'query' }), [stored]);
    const [both] = verifyCandidates(await extractLocalFeatures(flipped, { role: 'query', mirror: true }), [
      stored,
    ]);
    // Assess: ORB is not mirror-invariant, so the unmirrored pairing finds far fewer (22 here, not zero:
    // some of the cover's features survive a flip)
    expect(both!.mirrored).toBe(true);
    expect(both!.inliers).toBeGreaterThanOrEqual(3 * plain!.inliers);
  });

  it('finds fewer than 8 inliers between unrelated photos', async () => {
    // Prepare: whole grove and dinner photos against the products cut from the tote
    const queries = await Promise.all(
      [GROVE, DINNER].map((image) => extractLocalFeatures(image, { role: 'query' })),
    );
    const products = Object.keys(PRODUCTS).map((name) => items[names.indexOf(name)]);
    for (const query of queries) {
      // Act
      const results = verifyCandidates(query, products);
      // Assess
      for (const result of results) expect(result.inliers).toBeLessThan(8);
    }
  });

  for (const product of ['book', 'soap', 'towels'] as const) {
    it(`ranks the ${product} first among ${22} distractors when photographed in its surroundings`, async () => {
      // Prepare: the product with 30 px of the tote around it, rotated and re-encoded; global scores that
      // put the right item in the middle of the shortlist, as a weak embedding would
      const query = await extractLocalFeatures(
        await VIEWS['rotated 20°']!(await inContext(PRODUCTS[product], 30)),
        {
          role: 'query',
        },
      );
      const globalScores = names.map((_, k) => 0.8 - ((k * 7) % 23) / 100);
      // Act
      const verified = verifyCandidates(query, items);
      const ranked = rerankCandidates(
        names.map((name, k) => ({ name, globalScore: globalScores[k]!, inliers: verified[k]!.inliers })),
      );
      // Assess
      expect(ranked[0]!.name).toBe(product);
      expect(ranked[0]!.verified).toBe(true);
      expect(ranked[0]!.score).toBeGreaterThan(0.9);
      // No tile of an unrelated photo is verified (the towels' crop overlaps the mousetrap's, so that
      // pair legitimately verifies each other)
      expect(ranked.filter((r) => r.verified && !(r.name in PRODUCTS))).toEqual([]);
    });
  }
});
