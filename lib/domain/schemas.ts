import { z } from 'zod';
import { isBase64Image } from '#lib/domain/image-data.ts';

/**
 * Request schemas of the public endpoints, following the field names and rules of the interface
 * document. They validate only (no transforms), so the same schemas generate the OpenAPI document.
 * Unknown top-level fields are ignored for compatibility with existing clients.
 */
export const MAX_LIMIT = 100;
export const MAX_WINDOW = 1000;

const imageData = z
  .string()
  .min(1, 'is empty')
  // (An empty string is one problem, not also a bad image: one detail for the path. Not by aborting at
  // the min, which also hid the request's other problems, such as an offset past the window.)
  .refine(
    (value) => value === '' || isBase64Image(value),
    'expected a base64-encoded image (a data: URL prefix is accepted)',
  )
  .describe(
    'Base64-encoded image (JPEG, PNG, WebP, GIF, AVIF or TIFF; an animated GIF or WebP is read as ' +
      'its first frame); a data: URL prefix is accepted. At most 40 megapixels and 16384 pixels per ' +
      'side, an AVIF at most 4096x4096 pixels, and a JPEG of at most 100 scans; otherwise 422 ' +
      'invalid_image.',
  );
const limit = z
  .number()
  .int()
  .min(1)
  .max(MAX_LIMIT)
  .default(10)
  .describe('Maximum number of results; 1 to 100, default 10.');
const offset = z
  .number()
  .int()
  .min(0)
  .max(MAX_WINDOW - 1, `offset + limit must not exceed ${MAX_WINDOW}`)
  .default(0)
  .describe(`Pagination offset; default 0. offset + limit must not exceed ${MAX_WINDOW}.`);
/**
 * Longest product id an import accepts, so also the longest one a request or a cursor can name. Here
 * rather than in products.ts, which imports this module.
 */
export const MAX_PRODUCT_ID_LENGTH = 200;

/**
 * A search id in the body. Null and the empty string count as absent there, as the authentication
 * middleware reads them (the Authorization header may carry the id); without one, the middleware answers
 * 401 missing_search_id before this schema is applied. A number is read as its digits there on every
 * endpoint (lib/http/middleware.ts bodySearchId; the interface types the id as integer in one table), so
 * the schemas, and the document made from them, take one too.
 */
const searchId = z
  .union([z.string(), z.number()])
  .describe(
    'Search id (API key); a number is read as its digits. May instead be sent as Authorization: Bearer <searchId>.',
  );

/** limit/offset of the root search, which the interface shows as strings. */
const intLike = (min: number, max: number, description: string) => {
  const range = `must be between ${min} and ${max}`;
  return (
    z
      .union(
        [
          // The number's bounds are written out too, so the published JSON Schema shows them.
          z.number().int().min(min, range).max(max, range),
          // (A sign is read, so that "-1" is out of range rather than "not a whole number".)
          z.string().regex(/^\s*[-+]?\d+\s*$/, 'expected a whole number'),
        ],
        // Neither a number nor a string (1.5, true, null): zod said "Invalid input".
        { error: `expected a whole number between ${min} and ${max}, as a number or a string` },
      )
      // Strings of digits only: a number out of range and a string of other text each have their message.
      .refine(
        (v) => typeof v === 'number' || !/^\s*[-+]?\d+\s*$/.test(v) || (Number(v) >= min && Number(v) <= max),
        range,
      )
      .describe(description)
  );
};

/** (A limit or offset that is no number has its own issue: the window is not named for it as well.) */
const withinWindow = (value: { limit: number | string; offset: number | string }) => {
  const [limit, offset] = [Number(value.limit), Number(value.offset)];
  // An offset past the window or a limit past its range is that field's own issue already: `limit: 1001`
  // with no offset was also "offset + limit must not exceed 1000" at the offset.
  if (Number.isNaN(limit + offset) || offset >= MAX_WINDOW || limit > MAX_LIMIT) return true;
  return offset + limit <= MAX_WINDOW;
};
const windowIssue = { message: `offset + limit must not exceed ${MAX_WINDOW}`, path: ['offset'] };

export const SearchImageRequest = z
  .object({ imageData, limit, offset, searchId: searchId.nullable().optional() })
  .refine(withinWindow, windowIssue);
export type SearchImageRequest = z.infer<typeof SearchImageRequest>;

export const DETECT_ACTIONS = ['OD', 'OD+SEARCH'] as const;
const ACTION_NAMES = new Set(['OD', 'SEARCH', 'OD+SEARCH']);

/**
 * The detect action as a string, from the forms a client may send: the interface types `action` as an
 * object ("selects the actions to perform") and its example sends "OD", so the names may also come as an
 * array or as an object of boolean flags (SEARCH implies OD). Undefined for anything else, including a
 * selection of nothing: a client that asked for something it does not get is told, not answered "OD".
 */
function actionOf(value: string | string[] | Record<string, boolean>): DetectAction | undefined {
  const names =
    typeof value === 'string'
      ? [value]
      : Array.isArray(value)
        ? value
        : Object.entries(value)
            .filter(([, on]) => on)
            .map(([name]) => name);
  if (names.length === 0 || !names.every((name) => ACTION_NAMES.has(name))) return undefined;
  return names.some((name) => name !== 'OD') ? 'OD+SEARCH' : 'OD';
}
type DetectAction = (typeof DETECT_ACTIONS)[number];
const ACTION_FORMS =
  'expected "OD" or "OD+SEARCH", as a string, an array of names (OD, SEARCH) or an object of boolean flags';

export const DetectRequest = z.object({
  imageData,
  searchId: searchId.nullable().optional(),
  action: z
    .union(
      [
        z.enum(DETECT_ACTIONS),
        z.array(z.enum([...ACTION_NAMES] as [string, ...string[]])).describe('The names: ["OD", "SEARCH"].'),
        z.record(z.string(), z.boolean()).describe('Flags: {"OD": true, "SEARCH": true}.'),
      ],
      { error: ACTION_FORMS },
    )
    .transform((value, context) => {
      const action = actionOf(value);
      if (action === undefined)
        context.addIssue({
          code: 'custom',
          message: ACTION_FORMS,
        });
      return action ?? 'OD';
    })
    .default('OD')
    .describe(
      'OD: detect objects. OD+SEARCH: also run image search on each detected object. The interface types ' +
        'the field as an object and shows a string: an array of names (["OD", "SEARCH"]) or an object of ' +
        'boolean flags ({"OD": true, "SEARCH": true}) is read as the string it stands for.',
    ),
  limit: limit.describe('With OD+SEARCH: products per object; 1 to 100, default 10.'),
});
export type DetectRequest = z.infer<typeof DetectRequest>;

/** Product fields that related-products filters may name; `metadata.<name>` is also accepted. */
export const FILTER_KEYS = [
  'brand',
  'color',
  'category',
  'product_type',
  'gender',
  'age_group',
  'condition',
  'availability',
  'size',
  'material',
  'item_group_id',
  'currency',
] as const;

const filterKey = z
  .string()
  .refine(
    (key) => (FILTER_KEYS as readonly string[]).includes(key) || /^metadata\.[A-Za-z0-9_-]{1,64}$/.test(key),
    `unknown filter key; use one of ${FILTER_KEYS.join(', ')} or metadata.<name>`,
  );

export const Filter = z.object({
  key: filterKey,
  value: z.union([z.string(), z.number(), z.boolean()]).describe('Value to match (case-insensitive).'),
});

export const RelatedRequest = z
  .object({
    imageData: imageData.optional(),
    productId: z
      .string()
      .min(1)
      .max(MAX_PRODUCT_ID_LENGTH)
      .optional()
      .describe('Customer product id. Wins over imageData when both are given.'),
    limit,
    offset,
    searchId: searchId.nullable().optional(),
    filters: z.array(Filter).max(50).optional().describe('AND across keys, OR within a key.'),
    fallback: imageData
      .optional()
      .describe(
        'Base64 image used when productId is unknown (or has no searchable image) and imageData is ' +
          'absent or refused as an image (what would be its 422 invalid_image).',
      ),
    context: z
      .object({
        category: z.string().max(500),
        domain: z.string().max(253),
        pageUrl: z.string().max(2048),
        type: z.string().max(100),
      })
      .partial()
      .optional()
      .describe(
        'Where the widget runs: type and domain are counted in the usage report (contexts), category narrows the results; pageUrl is not kept.',
      ),
  })
  .refine((value) => value.imageData !== undefined || value.productId !== undefined, {
    message: 'provide imageData or productId',
    path: ['imageData'],
  })
  .refine(withinWindow, windowIssue);
export type RelatedRequest = z.infer<typeof RelatedRequest>;

export const RootSearchRequest = z
  .object({
    imageData,
    limit: intLike(
      1,
      MAX_LIMIT,
      'Maximum number of results, 1 to 100, as a number or a string; default 10.',
    ).default(10),
    offset: intLike(
      0,
      MAX_WINDOW - 1,
      `Pagination offset, as a number or a string; default 0. offset + limit must not exceed ${MAX_WINDOW}.`,
    ).default(0),
    feedId: searchId.nullable().optional().describe('Search id (API key); the root search names it feedId.'),
  })
  .refine(withinWindow, windowIssue);
export type RootSearchRequest = z.infer<typeof RootSearchRequest>;
