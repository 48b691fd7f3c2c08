import { z } from 'zod';
import {
  CreateFeedRequest,
  CreateKeyRequest,
  UpdateFeedRequest,
  UsageQuery,
} from '#lib/domain/admin/schemas.ts';
import { FEED_FORMATS } from '#lib/domain/catalogue/feed-formats.ts';
import {
  IMPORT_PROBLEM_SEVERITIES,
  ListImportsQuery,
  ProductsPageQuery,
  StartImportRequest,
} from '#lib/domain/catalogue/imports.ts';
import { type ErrorCode, type ErrorDetail, IMAGE_REFUSAL_REASONS } from '#lib/domain/errors.ts';
import { DOMAIN_PATTERN, PLANS } from '#lib/domain/feeds.ts';
import {
  adminProductView,
  AVAILABILITY,
  availabilityText,
  type GroupHit,
  imageSearchItem,
  type Product,
  relatedItem,
  rootSearchItem,
} from '#lib/domain/products.ts';
import { DetectRequest, RelatedRequest, RootSearchRequest, SearchImageRequest } from '#lib/domain/schemas.ts';
import { VARY } from '#lib/http/cors.ts';
import { authenticationChallenge, STATUS_OF } from '#lib/http/errors.ts';
import { IDEMPOTENCY_HEADER, ORIGINAL_REQUEST_HEADER, REPLAYED_HEADER } from '#lib/http/idempotency.ts';
import { type Route, ROUTES } from '#lib/http/routes.ts';

/**
 * The OpenAPI 3.1 document of the service, generated from the route table and from the very zod schemas
 * the handlers validate with (`z.toJSONSchema(schema, { io: 'input' })`), so the document cannot drift
 * from what the handlers accept. Response shapes are zod schemas too (documentation only), converted the
 * same way. Routes of ROUTES without an entry in OPERATION_DOCS still appear, with a generic description.
 */

type JsonObject = Record<string, unknown>;

const JSON_SCHEMA = { io: 'input', target: 'draft-2020-12' } as const;

/** A 1×1 PNG: the smallest image every example can carry and the validator accepts. */
export const EXAMPLE_IMAGE =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';
const EXAMPLE_SEARCH_ID = 'vps_3hV8rQm0yJt2cW9pXb4LkN1sZa6DfGe7';
const EXAMPLE_REQUEST_ID = 'c0a8012e-7f3b-4c1d-9e2a-5b6c7d8e9f01';

// ---- Response shapes (documentation schemas; requests use the handlers' own schemas) ----

const cents = z.number().int().describe('Integer amount in cents.');
/** A price field: cents, or null when the feed gives none (e.g. no sale price). */
const centsOrNone = cents.nullable().describe('Integer amount in cents; null when the feed has none.');

/** Text fields of the feed: `""` when the feed gives none. */
const text = (description?: string) => (description ? z.string().describe(description) : z.string());
const availabilityCode = z
  .enum(AVAILABILITY)
  .describe('in_stock, out_of_stock, preorder or backorder (in_stock when the feed gives none).');
const availabilityWords = z
  .enum(AVAILABILITY.map(availabilityText) as [string, ...string[]])
  .describe('"in stock", "out of stock", "preorder" or "backorder".');
const score = z
  .number()
  .min(0)
  .max(1)
  .describe(
    'Calibrated relevance in [0, 1], the same scale for every query (docs/api.md); results under the minimum score are left out.',
  );

/** The fields every result shows (lib/domain/products.ts commonFields), in the image-search form. */
const commonProductFields = {
  feed_id: z.string(),
  item_group_id: text('The item group (the product id when the feed gives none).'),
  product_id: z.string(),
  title: z.string(),
  short_title: text(),
  description: text(),
  age_group: text(),
  brand: text(),
  color: text(),
  condition: text(),
  gender: text(),
  category: text(),
  product_type: text(),
  gtin: text(),
  mpn: text(),
  material: text(),
  size: text(),
  image_link: text('Product image URL.'),
  link: text('Product page URL.'),
  price: centsOrNone,
  sale_price: centsOrNone,
  currency: text(),
  shipping_price: centsOrNone,
  shipping_currency: text(),
  shipping_country: text(),
  shipping_weight: text(),
  product_updated_at: text("The feed's own update time of the product, as given."),
};
const variantFields = {
  product_id: z.string(),
  color: text(),
  size: text(),
  price: centsOrNone,
  sale_price: centsOrNone,
  currency: text(),
  image_link: text(),
  availability: availabilityCode,
  link: text(),
};
const storedFields = {
  id: z.string().describe('UUID the service gives the product.'),
  created_at: z.string().describe('When the product was first imported (ISO 8601).'),
  updated_at: z.string().describe('When an import last changed it (ISO 8601).'),
};

export const SearchProductSchema = z
  .strictObject({
    ...commonProductFields,
    availability: availabilityCode,
    product_highlight: z.array(z.string()),
    score,
    variants: z
      .array(z.strictObject(variantFields))
      .describe('Every product of the item group, the result included.'),
    variant_count: z.number().int(),
  })
  .describe('An image-search result (also the products of detect OD+SEARCH): the best product of its group.');

export const RelatedProductSchema = z
  .strictObject({
    ...storedFields,
    ...commonProductFields,
    availability: availabilityWords,
    additional_image_links: text('Further image URLs, comma-joined.'),
    sb_image_url: text(),
    product_highlight: text('Highlights joined by ", ".'),
    metadata: z.record(z.string(), z.string()).describe("The feed's own extra fields."),
    score,
    update_hash: z.string().describe('Hash of the product as imported; changes with its content.'),
    version: z.number().int().describe('Starts at 1; +1 with each change of its content.'),
    variants: z
      .array(
        z.strictObject({
          id: z.string(),
          item_group_id: z.string(),
          ...variantFields,
          additional_image_links: text(),
          availability: availabilityWords,
          metadata: z.record(z.string(), z.string()),
        }),
      )
      .describe('Every product of the item group, the result included.'),
    variant_count: z.number().int(),
  })
  .describe('A related product.');

export const RootSearchProductSchema = z
  .strictObject({
    ...storedFields,
    ...commonProductFields,
    availability: availabilityWords,
    price: z.string().describe('Decimal string of the cents ("1999"); "" when the feed has none.'),
    sale_price: z.string(),
    shipping_price: z.string(),
    product_highlight: text('Highlights joined by ", ".'),
    variant_count: z.number().int(),
    '': z
      .string()
      .describe('The score, as a string with 6 decimals: the empty-named property of the interface.'),
  })
  .describe('A root search result: no variants; prices as strings; the score under the empty name.');

export const StoredProductSchema = z
  .strictObject({
    ...storedFields,
    ...commonProductFields,
    availability: availabilityCode,
    additional_image_links: z.array(z.string()).describe('Further image URLs, at most 10.'),
    sb_image_url: text(),
    product_highlight: z.array(z.string()),
    metadata: z.record(z.string(), z.string()).describe("The feed's own extra fields."),
    group: z.string().describe('The item group the product is searched under (its own id without one).'),
    update_hash: z.string().describe('Hash of the product as imported; changes with its content.'),
    version: z.number().int().describe('Starts at 1; +1 with each change of its content.'),
    embedded_model: z
      .string()
      .optional()
      .describe('The embedding model of its stored vectors; absent until an image is embedded.'),
    vector_count: z
      .number()
      .int()
      .min(0)
      .describe('Images with a stored vector: 0 when none could be fetched or decoded (not searchable).'),
  })
  .describe('A product as stored (admin products browser): every field of the feed, and its search state.');

export const DetectedObjectSchema = z.object({
  box: z
    .tuple([z.number(), z.number(), z.number(), z.number()])
    .describe('[x_min, y_min, x_max, y_max] in pixels of the submitted image.'),
  label: z.string().describe('COCO class name.'),
  score: z.number().min(0).max(1),
  products: z
    .array(SearchProductSchema)
    .optional()
    .describe('With action OD+SEARCH: image-search results of the crop.'),
});

export const DetectResponseSchema = z.object({
  action: z.string(),
  searchId: z.string(),
  results: z.object({ objects: z.array(DetectedObjectSchema) }),
  processTimeSeconds: z.number(),
});

export const FeedSchema = z.object({
  feedId: z.string(),
  name: z.string(),
  plan: z.enum(PLANS),
  hourlyLimit: z.number().int().describe('The hourly limit in force (plan default or custom).'),
  customHourlyLimit: z
    .boolean()
    .describe("Whether hourlyLimit is the feed's own (enterprise) rather than its plan's default."),
  domains: z
    .array(z.string().regex(DOMAIN_PATTERN))
    .describe('The allowed domains as stored: hostnames in lower-case ASCII (punycode), *. for a wildcard.'),
  requireOrigin: z.boolean(),
  createdAt: z.string(),
  updatedAt: z.string(),
  lastImport: z
    .object({
      importId: z.string(),
      status: z.enum(['queued', 'running', 'succeeded', 'failed']),
      mode: z.enum(['full', 'incremental']),
      createdAt: z.string(),
      finishedAt: z.string().optional(),
    })
    .nullable()
    .describe(
      "The feed's import status: its newest import (GET …/imports/{importId} for its counts and errors); null before the first. Not part of the feed's ETag.",
    ),
});

export const SearchKeySchema = z.object({
  searchId: z.string().describe('The search id (API key).'),
  feedId: z.string(),
  name: z.string(),
  createdAt: z.string(),
  lastUsedAt: z.string().optional(),
  revokedAt: z.string().optional(),
});

const usageTotals = {
  requests: z.number().int(),
  ok: z.number().int(),
  clientErrors: z.number().int(),
  serverErrors: z.number().int(),
  rateLimited: z.number().int().describe('Requests answered 429.'),
};
const endpointName = z.enum(['search_image', 'detect', 'related', 'root_search']);

export const UsageReportSchema = z.object({
  feedId: z.string(),
  from: z.string(),
  to: z.string(),
  days: z.array(z.object({ day: z.string(), endpoint: endpointName, ...usageTotals })),
  keys: z.array(z.object({ searchId: z.string(), ...usageTotals })),
  contexts: z
    .array(
      z.object({
        type: z.string().describe('The request\'s context.type; "" when it gave none.'),
        domain: z.string().describe('The request\'s context.domain in lower case; "" when it gave none.'),
        requests: z.number().int(),
      }),
    )
    .max(100)
    .describe(
      'Related-products requests per context (type and domain) over the range, the 100 most frequent; requests without either are not listed.',
    ),
  totals: z.object(usageTotals),
});

const counter = (description: string) => z.number().int().min(0).describe(description);

export const ImportProblemSchema = z.strictObject({
  row: z
    .number()
    .int()
    .nullable()
    .describe('1-based position of the item in the file (CSV/TSV: data rows); null for the file as a whole.'),
  productId: z.string().optional().describe("The row's id, cut to 200 characters."),
  message: z.string(),
  severity: z
    .enum(IMPORT_PROBLEM_SEVERITIES)
    .describe(
      'error: the row was not imported (counted in failed). warning: the product was imported without something (an additional image, a metadata field), or a full import kept products its file does not list.',
    ),
});

export const ImportSchema = z
  .strictObject({
    feedId: z.string(),
    importId: z.string(),
    status: z.enum(['queued', 'running', 'succeeded', 'failed']),
    mode: z.enum(['full', 'incremental']),
    source: z.union([
      z.strictObject({
        kind: z.literal('url'),
        url: z
          .string()
          .describe(
            'The feed URL, its userinfo and the values of credential parameters (token, key, sig…) as ***.',
          ),
      }),
      z.strictObject({ kind: z.literal('inline') }),
    ]),
    format: z.enum(FEED_FORMATS).optional().describe('Given, or found from the file once it is read.'),
    total: counter('Rows in the file, known once it has been read through.'),
    processed: counter('Rows handled so far: embedded + updated + skipped + failed.'),
    embedded: counter('New products, or products whose images changed: images fetched and embedded.'),
    updated: counter('Content changed, images did not: stored vectors kept, nothing fetched.'),
    skipped: counter('Unchanged.'),
    failed: counter('Rows not imported.'),
    removed: counter('Products a full import removed because its file no longer lists them.'),
    errors: z.array(ImportProblemSchema).max(100).describe('The first 100 problems, by row.'),
    message: z.string().optional().describe('Why the import as a whole failed.'),
    createdAt: z.string(),
    updatedAt: z.string(),
    startedAt: z.string().optional(),
    finishedAt: z.string().optional(),
  })
  .describe('A feed import and its progress.');

const ERROR_CODES = Object.keys(STATUS_OF) as ErrorCode[];

export const ErrorBodySchema = z
  .object({
    error: z.object({
      status: z.number().int().describe('The HTTP status, repeated.'),
      code: z.enum(ERROR_CODES as [ErrorCode, ...ErrorCode[]]),
      message: z.string().describe('Human-readable; safe to show. Internals are never exposed.'),
      details: z
        .array(
          z.object({
            path: z.string().describe('The request field: `limit`, `filters.0.key`, `imageData`.'),
            message: z.string(),
            reason: z
              .enum(IMAGE_REFUSAL_REASONS)
              .optional()
              .describe('Why an image was refused (422 invalid_image).'),
            format: z
              .string()
              .optional()
              .describe("A refused image's format as read from its bytes (`bmp`, `heic`), when recognised."),
          }),
        )
        .describe('Per-field problems (400; 422 invalid_image names the image field).'),
    }),
    requestId: z.string().describe('Also in the X-Request-Id header; quote it to support.'),
  })
  .describe('The one error body of every non-2xx response.');

/** Components: request schemas of the handlers, response shapes and the error body. */
const COMPONENT_SCHEMAS: Record<string, { schema: z.ZodType; io: 'input' | 'output' }> = {
  SearchImageRequest: { schema: SearchImageRequest, io: 'input' },
  DetectRequest: { schema: DetectRequest, io: 'input' },
  RelatedRequest: { schema: RelatedRequest, io: 'input' },
  RootSearchRequest: { schema: RootSearchRequest, io: 'input' },
  CreateFeedRequest: { schema: CreateFeedRequest, io: 'input' },
  UpdateFeedRequest: { schema: UpdateFeedRequest, io: 'input' },
  CreateKeyRequest: { schema: CreateKeyRequest, io: 'input' },
  StartImportRequest: { schema: StartImportRequest, io: 'input' },
  SearchProduct: { schema: SearchProductSchema, io: 'output' },
  RelatedProduct: { schema: RelatedProductSchema, io: 'output' },
  RootSearchProduct: { schema: RootSearchProductSchema, io: 'output' },
  DetectResponse: { schema: DetectResponseSchema, io: 'output' },
  Feed: { schema: FeedSchema, io: 'output' },
  SearchKey: { schema: SearchKeySchema, io: 'output' },
  UsageReport: { schema: UsageReportSchema, io: 'output' },
  Import: { schema: ImportSchema, io: 'output' },
  StoredProduct: { schema: StoredProductSchema, io: 'output' },
  Error: { schema: ErrorBodySchema, io: 'output' },
};

/** A page of a component's items and the cursor of the next one: its JSON Schema and its zod shape. */
function pageOf(key: string, component: string, item: z.ZodType, cursor: string) {
  return {
    schema: {
      type: 'object',
      properties: {
        [key]: { type: 'array', items: ref(component) },
        cursor: { type: 'string', description: cursor },
      },
      required: [key],
    },
    zod: z.strictObject({ [key]: z.array(item), cursor: z.string().optional() }),
  };
}

// ---- Examples ----

/** A stored product of the examples; each endpoint's example is what its serializer makes of it. */
function exampleStoredProduct(productId: string, size: string, saved: Partial<Product> = {}): Product {
  return {
    product_id: productId,
    item_group_id: 'SKU-1042',
    title: 'Linen shirt, red',
    short_title: 'Linen shirt',
    description: 'A light shirt of washed linen.',
    age_group: 'adult',
    availability: 'in_stock',
    brand: 'Northwind',
    color: 'red',
    condition: 'new',
    gender: 'unisex',
    category: 'Apparel > Shirts',
    product_type: 'Shirts',
    gtin: '',
    mpn: '',
    material: 'linen',
    size,
    image_link: 'https://shop.example.com/img/sku-1042-red.jpg',
    additional_image_links: ['https://shop.example.com/img/sku-1042-red-back.jpg'],
    sb_image_url: '',
    link: 'https://shop.example.com/p/sku-1042',
    price: 4990,
    sale_price: 3990,
    currency: 'EUR',
    shipping_price: null,
    shipping_currency: '',
    shipping_country: '',
    shipping_weight: '',
    product_highlight: ['100% linen'],
    metadata: { season: 'summer' },
    product_updated_at: '2026-10-30T08:00:00Z',
    feed_id: 'demo',
    id: '6f0b1c2d-3e4f-4a5b-8c6d-7e8f9a0b1c2d',
    group: 'SKU-1042',
    update_hash: '9c1185a5c5e9fc54612808977ee8f548b2258d31',
    version: 2,
    created_at: '2026-11-01T09:05:00.000Z',
    updated_at: '2026-11-02T10:30:00.000Z',
    vector_count: 2,
    ...saved,
  };
}
const exampleHit: GroupHit = {
  product: exampleStoredProduct('SKU-1042-RED-M', 'M'),
  variants: [
    exampleStoredProduct('SKU-1042-RED-M', 'M'),
    exampleStoredProduct('SKU-1042-RED-L', 'L', {
      id: '0a1b2c3d-4e5f-4a6b-9c7d-8e9f0a1b2c3d',
      availability: 'out_of_stock',
    }),
  ],
  score: 0.934,
};
const exampleProduct = imageSearchItem(exampleHit);
const exampleFeed = {
  feedId: 'shop-eu',
  name: 'Shop EU',
  plan: 'pro',
  hourlyLimit: 1000,
  customHourlyLimit: false,
  domains: ['shop.example.com', '*.example.com'],
  requireOrigin: false,
  createdAt: '2026-11-01T09:00:00.000Z',
  updatedAt: '2026-11-02T10:30:00.000Z',
  lastImport: {
    importId: 'imp_0mwz80pna_4f9c2a1b',
    status: 'succeeded',
    mode: 'full',
    createdAt: '2026-11-02T11:00:00.000Z',
    finishedAt: '2026-11-02T11:04:12.000Z',
  },
};
const exampleKey = {
  searchId: EXAMPLE_SEARCH_ID,
  feedId: 'shop-eu',
  name: 'storefront',
  createdAt: '2026-11-01T09:01:00.000Z',
};
const zeroTotals = { requests: 0, ok: 0, clientErrors: 0, serverErrors: 0, rateLimited: 0 };
const exampleUsage = {
  feedId: 'shop-eu',
  from: '2026-11-01',
  to: '2026-11-02',
  days: [
    {
      day: '2026-11-01',
      endpoint: 'search_image',
      requests: 120,
      ok: 100,
      clientErrors: 2,
      serverErrors: 0,
      rateLimited: 18,
    },
    { day: '2026-11-02', endpoint: 'related', ...zeroTotals, requests: 5, ok: 5 },
  ],
  keys: [
    {
      searchId: EXAMPLE_SEARCH_ID,
      requests: 125,
      ok: 105,
      clientErrors: 2,
      serverErrors: 0,
      rateLimited: 18,
    },
  ],
  contexts: [{ type: 'product_page', domain: 'shop.example.com', requests: 5 }],
  totals: { requests: 125, ok: 105, clientErrors: 2, serverErrors: 0, rateLimited: 18 },
};

const exampleImport = {
  feedId: 'shop-eu',
  importId: 'imp_01JDX3V6Q9R2',
  status: 'succeeded',
  mode: 'full',
  source: { kind: 'url', url: 'https://shop.example.com/feed.xml' },
  format: 'xml',
  total: 3,
  processed: 3,
  embedded: 1,
  updated: 0,
  skipped: 1,
  failed: 1,
  removed: 0,
  errors: [
    {
      row: 2,
      productId: 'SKU-1042-RED-M',
      message: 'additional_image_link https://shop.example.com/img/sku-1042-back.jpg: HTTP 404.',
      severity: 'warning',
    },
    { row: 3, productId: 'SKU-2001', message: 'title is missing.', severity: 'error' },
  ],
  createdAt: '2026-11-02T10:00:00.000Z',
  updatedAt: '2026-11-02T10:00:04.000Z',
  startedAt: '2026-11-02T10:00:01.000Z',
  finishedAt: '2026-11-02T10:00:04.000Z',
};

/** One example message per error code, worded like the service's own. */
export const ERROR_EXAMPLES: Record<ErrorCode, { message: string; details?: ErrorDetail[] }> = {
  invalid_request: {
    message: 'Invalid limit: Too big: expected number to be <=100',
    details: [{ path: 'limit', message: 'Too big: expected number to be <=100' }],
  },
  missing_search_id: {
    message: 'Send a search id as Authorization: Bearer <searchId> or in the body field searchId.',
  },
  invalid_search_id: { message: 'Unknown search id.' },
  unauthorized: { message: 'Send the admin token as Authorization: Bearer <token>.' },
  domain_not_allowed: { message: 'Requests from evil.example.net are not allowed for this search id.' },
  search_id_revoked: { message: 'This search id has been revoked.' },
  not_found: { message: 'Search id not found.' },
  feed_not_found: { message: 'Feed shop-eu not found.' },
  product_not_found: { message: 'Product SKU-0000 not found in this feed.' },
  import_not_found: { message: 'Import imp_0123 not found.' },
  method_not_allowed: { message: 'Use POST on this path.' },
  conflict: { message: 'Feed shop-eu already exists.' },
  precondition_failed: {
    message:
      'Feed shop-eu is not at the version in If-Match (it changed since it was read); nothing was changed. Read it again and apply the change to that.',
  },
  idempotency_key_in_use: {
    message: 'A request with this Idempotency-Key is still running; retry once it has been answered.',
  },
  idempotency_key_reused: {
    message:
      'This Idempotency-Key was used for another request (another path or body); send a new key with a new request.',
  },
  payload_too_large: { message: 'Request body exceeds 6291456 bytes; send a smaller image.' },
  unsupported_media_type: { message: 'Send the request body as JSON with Content-Type: application/json.' },
  invalid_image: {
    message:
      'Invalid imageData: BMP is not a supported image format (supported: JPEG, PNG, WebP, GIF, AVIF, TIFF).',
    details: [
      {
        path: 'imageData',
        message: 'BMP is not a supported image format (supported: JPEG, PNG, WebP, GIF, AVIF, TIFF)',
        reason: 'unsupported_format',
        format: 'bmp',
      },
    ],
  },
  rate_limited: { message: 'Hourly request limit of the plan exceeded. Retry in 1200 s.' },
  internal: { message: 'Internal error. Retry later; if it persists, contact support with the request id.' },
  unavailable: { message: 'The image models are not available. Retry later.' },
};

export function errorExample(code: ErrorCode) {
  const { message, details = [] } = ERROR_EXAMPLES[code];
  return { error: { status: STATUS_OF[code], code, message, details }, requestId: EXAMPLE_REQUEST_ID };
}

// ---- Operations ----

/** What the document says about one route beyond the route table. */
export interface OperationDoc {
  summary: string;
  description: string;
  tag: string;
  /** JSON body: the component name of the handler's zod schema, and an example that schema accepts. */
  body?: {
    component: keyof typeof COMPONENT_SCHEMAS;
    schema: z.ZodType;
    example: unknown;
    required: boolean;
  };
  /** Query string: the handler's zod object schema; each property becomes one parameter. */
  query?: { schema: z.ZodObject; example: Record<string, string> };
  response: { status: number; description: string; schema: JsonObject; zod?: z.ZodType; example?: unknown };
  /** Another success answer of the operation (a deletion that continues in the background: 202). */
  alsoResponse?: { status: number; description: string; schema: JsonObject; example?: unknown };
  /** Error codes beyond those every route of its access level can return. */
  errors: ErrorCode[];
  /** The success answer carries the resource's version as `ETag`. */
  etag?: boolean;
  /** Takes `If-Match` with that version (a change applied only to it, else 412). */
  ifMatch?: boolean;
}

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const imageErrors: ErrorCode[] = ['invalid_image', 'unavailable'];

export const OPERATION_DOCS: Record<string, OperationDoc> = {
  SearchImage: {
    tag: 'Search',
    summary: 'Image search',
    description:
      'Catalogue products that look like the image, best first (verified matches by their inliers, then the others by their calibrated score; the score is non-increasing in this order: docs/api.md "Ordering"), one per item group with its variants. An empty array when nothing matches.',
    body: {
      component: 'SearchImageRequest',
      schema: SearchImageRequest,
      required: true,
      example: { imageData: EXAMPLE_IMAGE, limit: 10, offset: 0, searchId: EXAMPLE_SEARCH_ID },
    },
    response: {
      status: 200,
      description: 'Matching products.',
      schema: { type: 'array', items: ref('SearchProduct') },
      zod: z.array(SearchProductSchema),
      example: [exampleProduct],
    },
    errors: imageErrors,
  },
  Detect: {
    tag: 'Search',
    summary: 'Detect objects',
    description:
      'Objects in the image with boxes (pixels of the submitted image), COCO labels and scores. Action OD+SEARCH adds image-search results per object.',
    body: {
      component: 'DetectRequest',
      schema: DetectRequest,
      required: true,
      example: { imageData: EXAMPLE_IMAGE, searchId: EXAMPLE_SEARCH_ID, action: 'OD' },
    },
    response: {
      status: 200,
      description: 'Detected objects.',
      schema: ref('DetectResponse'),
      zod: DetectResponseSchema,
      example: {
        action: 'OD',
        searchId: EXAMPLE_SEARCH_ID,
        results: { objects: [{ box: [12, 30, 220, 400], label: 'handbag', score: 0.87 }] },
        processTimeSeconds: 0.041,
      },
    },
    errors: imageErrors,
  },
  Related: {
    tag: 'Search',
    summary: 'Related products',
    description:
      'Products related to a customer product id (wins when both are given) or an image; the fallback image is used when the product is unknown and imageData is absent or refused as an image (422 invalid_image naming both when both are). The reference product and its variants are excluded.',
    body: {
      component: 'RelatedRequest',
      schema: RelatedRequest,
      required: true,
      example: {
        productId: 'SKU-1042-RED-M',
        limit: 10,
        offset: 0,
        searchId: EXAMPLE_SEARCH_ID,
        filters: [{ key: 'brand', value: 'Northwind' }],
      },
    },
    response: {
      status: 200,
      description: 'Related products.',
      schema: { type: 'array', items: ref('RelatedProduct') },
      zod: z.array(RelatedProductSchema),
      example: [relatedItem(exampleHit)],
    },
    errors: [...imageErrors, 'product_not_found'],
  },
  RootSearch: {
    tag: 'Search',
    summary: 'Root search',
    description:
      'The simpler search form at the host root: feedId names the search id, limit and offset may be strings, prices are strings.',
    body: {
      component: 'RootSearchRequest',
      schema: RootSearchRequest,
      required: true,
      example: { imageData: EXAMPLE_IMAGE, limit: '10', offset: '0', feedId: EXAMPLE_SEARCH_ID },
    },
    response: {
      status: 200,
      description: 'Matching products.',
      schema: { type: 'array', items: ref('RootSearchProduct') },
      zod: z.array(RootSearchProductSchema),
      example: [rootSearchItem(exampleHit)],
    },
    errors: imageErrors,
  },
  AdminCreateFeed: {
    tag: 'Admin: feeds',
    summary: 'Create a feed',
    description: 'A catalogue with its plan and allowed domains. The id is generated when absent.',
    body: {
      component: 'CreateFeedRequest',
      schema: CreateFeedRequest,
      required: true,
      example: { feedId: 'shop-eu', name: 'Shop EU', plan: 'pro', domains: ['shop.example.com'] },
    },
    response: {
      status: 201,
      description: 'The new feed.',
      schema: ref('Feed'),
      zod: FeedSchema,
      example: exampleFeed,
    },
    errors: ['conflict'],
    etag: true,
  },
  AdminListFeeds: {
    tag: 'Admin: feeds',
    summary: 'List feeds',
    description: 'Every feed with the hourly limit in force.',
    response: {
      status: 200,
      description: 'The feeds.',
      schema: {
        type: 'object',
        properties: { feeds: { type: 'array', items: ref('Feed') } },
        required: ['feeds'],
      },
      zod: z.object({ feeds: z.array(FeedSchema) }),
      example: { feeds: [exampleFeed] },
    },
    errors: [],
  },
  AdminGetFeed: {
    tag: 'Admin: feeds',
    summary: 'Get a feed',
    description: 'One feed.',
    response: {
      status: 200,
      description: 'The feed.',
      schema: ref('Feed'),
      zod: FeedSchema,
      example: exampleFeed,
    },
    errors: ['feed_not_found'],
    etag: true,
  },
  AdminUpdateFeed: {
    tag: 'Admin: feeds',
    summary: 'Change a feed',
    description:
      'Name, plan, allowed domains, custom hourly limit (enterprise) or requireOrigin. Send only the fields to change: concurrent changes of other fields are kept (409 conflict only when the feed kept changing meanwhile: send it again). A client that sends a list it edited (the domains) sends `If-Match` with the `ETag` of the feed it read: the change then applies only to that version, else 412 `precondition_failed` (read the feed again and apply the edit to it).',
    body: {
      component: 'UpdateFeedRequest',
      schema: UpdateFeedRequest,
      required: true,
      example: { plan: 'enterprise', hourlyLimit: 50000, domains: ['shop.example.com', '*.example.com'] },
    },
    response: {
      status: 200,
      description: 'The changed feed.',
      schema: ref('Feed'),
      zod: FeedSchema,
      example: exampleFeed,
    },
    errors: ['feed_not_found', 'conflict', 'precondition_failed'],
    etag: true,
    ifMatch: true,
  },
  AdminDeleteFeed: {
    tag: 'Admin: feeds',
    summary: 'Delete a feed',
    description:
      'Deletes the feed with everything stored for it: search ids, products, vectors, local features, imports with their files, and usage. An import running meanwhile stops and removes what it stored; a search id created meanwhile is removed (its creation answers 404). A feed too large to delete within the request (20 s), or busy for 10 s with an import that is stopping, is finished in the background: the answer is then 202, and the feed answers 404 (and 409 to a re-creation) until it is gone. A deletion that fails part way (5xx) leaves the feed hidden (404) and not re-creatable (409); the import runner tries again, and a repeated DELETE finishes it too.',
    response: { status: 204, description: 'Deleted.', schema: {} },
    alsoResponse: {
      status: 202,
      description: 'Accepted: the deletion continues in the background (the feed is already hidden).',
      schema: {
        type: 'object',
        properties: { feedId: { type: 'string' }, status: { const: 'deleting' } },
        required: ['feedId', 'status'],
      },
      example: { feedId: 'acme-shoes', status: 'deleting' },
    },
    errors: ['feed_not_found', 'precondition_failed'],
    ifMatch: true,
  },
  AdminCreateKey: {
    tag: 'Admin: keys',
    summary: 'Create a search id',
    description: 'A new search id (API key) for the feed; several may be live at once for rotation.',
    body: {
      component: 'CreateKeyRequest',
      schema: CreateKeyRequest,
      required: false,
      example: { name: 'storefront' },
    },
    response: {
      status: 201,
      description: 'The new key.',
      schema: ref('SearchKey'),
      zod: SearchKeySchema,
      example: exampleKey,
    },
    errors: ['feed_not_found'],
  },
  AdminListKeys: {
    tag: 'Admin: keys',
    summary: 'List search ids',
    description:
      "The feed's search ids, newest first, revoked ones included (revokedAt set), with their last use.",
    response: {
      status: 200,
      description: 'The keys.',
      schema: {
        type: 'object',
        properties: { keys: { type: 'array', items: ref('SearchKey') } },
        required: ['keys'],
      },
      zod: z.object({ keys: z.array(SearchKeySchema) }),
      example: { keys: [{ ...exampleKey, lastUsedAt: '2026-11-02T10:31:00.000Z' }] },
    },
    errors: ['feed_not_found'],
  },
  AdminRevokeKey: {
    tag: 'Admin: keys',
    summary: 'Revoke a search id',
    description: 'Later requests with the id answer 403 search_id_revoked.',
    response: {
      status: 200,
      description: 'The revoked key.',
      schema: ref('SearchKey'),
      zod: SearchKeySchema,
      example: { ...exampleKey, revokedAt: '2026-11-03T08:00:00.000Z' },
    },
    errors: ['not_found'],
  },
  AdminGetUsage: {
    tag: 'Admin: usage',
    summary: 'Usage of a feed',
    description:
      'Requests per day per endpoint (with 429s), per search id, and totals; the last 30 days by default.',
    query: { schema: UsageQuery, example: { from: '2026-11-01', to: '2026-11-02' } },
    response: {
      status: 200,
      description: 'The usage report.',
      schema: ref('UsageReport'),
      zod: UsageReportSchema,
      example: exampleUsage,
    },
    errors: ['feed_not_found'],
  },
  AdminStartImport: {
    tag: 'Admin: imports',
    summary: 'Start a feed import',
    description:
      'Imports a product feed file (Merchant Center XML, CSV, TSV, JSON or JSONL) fetched from `url` or sent inline in `content`; answers 202 at once, poll the import for progress.',
    body: {
      component: 'StartImportRequest',
      schema: StartImportRequest,
      required: true,
      example: {
        format: 'json',
        content:
          '[{"id":"SKU-1","title":"Red mug","image_link":"https://shop.example.com/img/sku-1.jpg","link":"https://shop.example.com/p/sku-1"}]',
      },
    },
    response: {
      status: 202,
      description: 'The import, queued: poll GET …/imports/{importId} for its progress.',
      schema: {
        type: 'object',
        properties: { importId: { type: 'string' }, status: { type: 'string', enum: ['queued'] } },
        required: ['importId', 'status'],
      },
      zod: z.strictObject({ importId: z.string(), status: z.literal('queued') }),
      example: { importId: exampleImport.importId, status: 'queued' },
    },
    errors: ['feed_not_found'],
  },
  AdminListImports: {
    tag: 'Admin: imports',
    summary: 'Recent imports of a feed',
    description:
      'Newest first, with their progress counters; `cursor` in the answer, when there are older ones, asks for the next page.',
    query: { schema: ListImportsQuery, example: { limit: '20' } },
    response: {
      status: 200,
      description: 'The imports.',
      ...pageOf('imports', 'Import', ImportSchema, 'Present when older imports remain.'),
      example: { imports: [exampleImport] },
    },
    errors: ['feed_not_found'],
  },
  AdminGetImport: {
    tag: 'Admin: imports',
    summary: 'One import and its progress',
    description:
      'Status (queued, running, succeeded, failed) and counters; the dashboard polls it. An import whose valid products all failed (every image unreachable) ends failed, its message naming the first error.',
    response: {
      status: 200,
      description: 'The import.',
      schema: ref('Import'),
      zod: ImportSchema,
      example: exampleImport,
    },
    errors: ['feed_not_found', 'import_not_found'],
  },
  AdminListProducts: {
    tag: 'Admin: products',
    summary: 'Browse the products of a feed',
    description: 'One page of products; pass the returned cursor for the next page.',
    query: { schema: ProductsPageQuery, example: { limit: '50' } },
    response: {
      status: 200,
      description: 'One page of products, in product_id order.',
      ...pageOf('products', 'StoredProduct', StoredProductSchema, 'Present when more products follow.'),
      example: {
        products: [
          adminProductView(exampleStoredProduct('SKU-1042-RED-M', 'M', { embedded_model: 'clip-vit-b32@1' })),
        ],
        cursor: 'U0tVLTEwNDItUkVELU0',
      },
    },
    errors: ['feed_not_found'],
  },
};

/** Codes every route of an access level can return; body-less routes cannot be 413/415. */
export function errorCodesOf(route: Route): ErrorCode[] {
  const doc = OPERATION_DOCS[route.name];
  const hasBody = route.method === 'POST' || route.method === 'PATCH';
  const common: ErrorCode[] =
    route.access === 'public'
      ? [
          'invalid_request',
          'missing_search_id',
          'invalid_search_id',
          'domain_not_allowed',
          'search_id_revoked',
          'payload_too_large',
          'unsupported_media_type',
          'rate_limited',
          'internal',
        ]
      : [
          'unauthorized',
          // Every admin route refuses query parameters it does not take (adminEndpoint).
          'invalid_request',
          // A path id longer than any id (pathIdsInRange).
          ...(route.path.includes('{') ? (['not_found'] as const) : []),
          ...(hasBody ? (['payload_too_large', 'unsupported_media_type'] as const) : []),
          ...(takesIdempotencyKey(route)
            ? (['idempotency_key_in_use', 'idempotency_key_reused'] as const)
            : []),
          'internal',
          // A store that is down or throttling (every admin route reads or writes one).
          'unavailable',
        ];
  const extra = doc?.errors ?? (route.path.includes('{feedId}') ? (['feed_not_found'] as ErrorCode[]) : []);
  return [...new Set([...common, ...extra])].sort(
    (a, b) => STATUS_OF[a] - STATUS_OF[b] || a.localeCompare(b),
  );
}

/** Admin creates run at most once per Idempotency-Key (lib/http/idempotency.ts). */
function takesIdempotencyKey(route: Route): boolean {
  return route.access === 'admin' && route.method === 'POST';
}

function operationId(route: Route): string {
  return route.name.charAt(0).toLowerCase() + route.name.slice(1);
}

function stripDialect(schema: JsonObject): JsonObject {
  const { $schema: _dialect, ...rest } = schema;
  return rest;
}

/** The JSON Schema of a zod schema as the document embeds it (the handler-side input view for requests). */
export function jsonSchemaOf(schema: z.ZodType, io: 'input' | 'output' = 'input'): JsonObject {
  return stripDialect(
    z.toJSONSchema(schema, {
      ...JSON_SCHEMA,
      io,
      ...(io === 'input' ? { override: asSent } : {}),
    }) as JsonObject,
  );
}

/** The keywords a string schema's checks write (zod's string processor). */
const STRING_KEYWORDS = ['pattern', 'allOf', 'format', 'minLength', 'maxLength', 'contentEncoding'];

/**
 * In an input view, a string that `.overwrite()` normalises (a feed domain entry,
 * lib/domain/admin/schemas.ts) keeps only the keywords of the checks before the overwrite, which check what
 * is sent. Those after it check the normalised value, and zod's input view kept them: the domains'
 * pattern of the stored lowercase-ASCII form refused inputs the server accepts and normalises
 * (`https://shop.example.com:8443`, `bücher.example`). The schema's description says what is accepted.
 */
function asSent({ zodSchema, jsonSchema }: { zodSchema: z.core.$ZodType; jsonSchema: JsonObject }): void {
  const def = zodSchema._zod.def;
  const checks = def.checks ?? [];
  const at = checks.findIndex((check) => check._zod.def.check === 'overwrite');
  if (def.type !== 'string' || at < 0) return;
  const sent = jsonSchemaOf(z.core.clone(zodSchema, { ...def, checks: checks.slice(0, at) }) as z.ZodType);
  for (const keyword of STRING_KEYWORDS) {
    if (keyword in sent) jsonSchema[keyword] = sent[keyword];
    else delete jsonSchema[keyword];
  }
}

/**
 * What a 413 carries: it is answered before a handler runs, as the gateway's own errors are
 * (infra/stacks/api-stack.ts addErrorResponses) and the local server's own mirror (lib/local/server.ts
 * gatewayHeaders): the same answer for every origin, never compressed, so no Vary.
 */
function beforeHandler(route: Route): string {
  const cors =
    route.access === 'public'
      ? 'it allows any origin (`*`)'
      : "it carries no CORS headers (none of the admin API's own errors do)";
  return `Answered before the handler runs (deployed, by the gateway for a body over its 10 MB; locally, by the server's own limit), as the gateway's own errors are: ${cors} and no \`Vary\`.`;
}

const rateLimitHeaders = {
  'RateLimit-Limit': { $ref: '#/components/headers/RateLimit-Limit' },
  'RateLimit-Remaining': { $ref: '#/components/headers/RateLimit-Remaining' },
  'RateLimit-Reset': { $ref: '#/components/headers/RateLimit-Reset' },
};
const requestIdHeader = { 'X-Request-Id': { $ref: '#/components/headers/X-Request-Id' } };
const varyHeader = { Vary: { $ref: '#/components/headers/Vary' } };
const challengeHeader = { 'WWW-Authenticate': { $ref: '#/components/headers/WWW-Authenticate' } };
const retryAfterHeader = { 'Retry-After': { $ref: '#/components/headers/Retry-After' } };
const etagHeader = { ETag: { $ref: '#/components/headers/ETag' } };
const EXAMPLE_ETAG = '"3q2-7w8Kx1bQ0pZl9yT4mN6vR2c"';
const replayedHeader = {
  [REPLAYED_HEADER]: { $ref: `#/components/headers/${REPLAYED_HEADER}` },
  [ORIGINAL_REQUEST_HEADER]: { $ref: `#/components/headers/${ORIGINAL_REQUEST_HEADER}` },
};

function errorResponses(route: Route): JsonObject {
  const byStatus = new Map<number, ErrorCode[]>();
  for (const code of errorCodesOf(route))
    byStatus.set(STATUS_OF[code], [...(byStatus.get(STATUS_OF[code]) ?? []), code]);
  const out: JsonObject = {};
  for (const [status, codes] of byStatus) {
    // A 413 is answered before the handler runs (beforeHandler): no Vary.
    const early = status === STATUS_OF.payload_too_large;
    const headers: JsonObject = { ...requestIdHeader, ...(early ? {} : varyHeader) };
    if (status === 401) Object.assign(headers, challengeHeader);
    // The rate limit is known once the search id resolved: on 429 and on errors raised after authentication.
    if (route.access === 'public' && (status === 429 || status === 400 || status === 404 || status >= 422))
      Object.assign(headers, rateLimitHeaders);
    if (status === 429 || status === 503 || codes.includes('idempotency_key_in_use'))
      Object.assign(headers, retryAfterHeader);
    out[String(status)] = {
      description: [
        codes.map((code) => `\`${code}\``).join(', '),
        ...(early ? [beforeHandler(route)] : []),
      ].join('. '),
      headers,
      content: {
        'application/json': {
          schema: ref('Error'),
          examples: Object.fromEntries(
            codes.map((code) => [code, { summary: ERROR_EXAMPLES[code].message, value: errorExample(code) }]),
          ),
        },
      },
    };
  }
  return out;
}

function pathParameters(route: Route): JsonObject[] {
  return [...route.path.matchAll(/\{(\w+)\}/g)].map(([, name]) => ({
    name,
    in: 'path',
    required: true,
    schema: { type: 'string', minLength: 1 },
    example: name === 'searchId' ? EXAMPLE_SEARCH_ID : name === 'feedId' ? 'shop-eu' : `${name}-1`,
  }));
}

function operation(route: Route): JsonObject {
  const doc = OPERATION_DOCS[route.name];
  const op: JsonObject = {
    operationId: operationId(route),
    tags: [doc?.tag ?? (route.access === 'admin' ? 'Admin' : 'Search')],
    summary: doc?.summary ?? route.name,
    description: doc?.description ?? `${route.method} ${route.path} (${route.access}).`,
    security: route.access === 'public' ? [{ searchId: [] }, {}] : [{ adminToken: [] }],
  };
  const parameters = pathParameters(route);
  if (doc?.query) {
    const query = jsonSchemaOf(doc.query.schema) as {
      properties?: Record<string, JsonObject>;
      required?: string[];
    };
    for (const [name, schema] of Object.entries(query.properties ?? {})) {
      parameters.push({
        name,
        in: 'query',
        required: (query.required ?? []).includes(name),
        schema,
        ...(doc.query.example[name] !== undefined ? { example: doc.query.example[name] } : {}),
      });
    }
  }
  if (takesIdempotencyKey(route)) {
    parameters.push({
      name: IDEMPOTENCY_HEADER,
      in: 'header',
      required: false,
      description:
        'Makes a retry safe: the first request with a key runs; its 2xx answer is kept 24 hours and given again (with `Idempotent-Replayed: true`) to every request with the same key, path and body. The same key with another path or body, or after the feed of its answer was deleted (and perhaps created again): 422 `idempotency_key_reused`; while the first is running: 409 `idempotency_key_in_use` with `Retry-After`. Errors are not kept (a retry runs again).',
      schema: { type: 'string', minLength: 1, maxLength: 255, pattern: '^[\\x21-\\x7e]+$' },
      example: '6f1c2d4e-8a7b-4c3d-9e2f-1a0b3c4d5e6f',
    });
  }
  if (doc?.ifMatch) {
    parameters.push({
      name: 'If-Match',
      in: 'header',
      required: false,
      description:
        'The `ETag` of the version the change was made from (or a comma-separated list of them): applied only while the feed is at one of them, else 412 `precondition_failed`. `*` applies to any version.',
      schema: { type: 'string' },
      example: EXAMPLE_ETAG,
    });
  }
  if (parameters.length > 0) op.parameters = parameters;
  if (doc?.body) {
    op.requestBody = {
      required: doc.body.required,
      content: { 'application/json': { schema: ref(doc.body.component), example: doc.body.example } },
    };
  }
  const successHeaders =
    route.access === 'public'
      ? { ...requestIdHeader, ...varyHeader, ...rateLimitHeaders }
      : {
          ...requestIdHeader,
          ...varyHeader,
          ...(takesIdempotencyKey(route) ? replayedHeader : {}),
          ...(doc?.etag ? etagHeader : {}),
        };
  const success = doc?.response ?? { status: 200, description: 'Success.', schema: {} };
  const successResponse: JsonObject = { description: success.description, headers: successHeaders };
  if (success.status !== 204) {
    const media: JsonObject = { schema: success.schema };
    if (success.example !== undefined) media.example = success.example;
    successResponse.content = { 'application/json': media };
  }
  op.responses = { [String(success.status)]: successResponse };
  const also = doc?.alsoResponse;
  if (also) {
    const media: JsonObject = { schema: also.schema };
    if (also.example !== undefined) media.example = also.example;
    (op.responses as JsonObject)[String(also.status)] = {
      description: also.description,
      headers: successHeaders,
      content: { 'application/json': media },
    };
  }
  Object.assign(op.responses as JsonObject, errorResponses(route));
  return op;
}

/**
 * HEAD beside each GET (locally and deployed: lib/http/middleware.ts): the GET's status and headers,
 * no body.
 */
function headOperation(route: Route, get: JsonObject): JsonObject {
  const responses: Record<string, JsonObject> = {};
  for (const [status, response] of Object.entries(get.responses as Record<string, JsonObject>)) {
    const { content: _body, ...rest } = response;
    responses[status] = rest;
  }
  return {
    ...get,
    operationId: `head${route.name}`,
    summary: `${String(get.summary)} (headers only)`,
    description: `As GET ${route.path}, without the body: the same status and headers (\`Content-Encoding\` included; \`Content-Length\` may be left out).`,
    responses,
  };
}

/** Builds the OpenAPI 3.1 document. `serverUrl` is where the API is reached (the local server passes its own). */
export function buildOpenApiDocument(
  options: { serverUrl?: string; routes?: readonly Route[] } = {},
): JsonObject {
  const routes = options.routes ?? ROUTES;
  const paths: Record<string, JsonObject> = {};
  for (const route of routes) {
    const item = (paths[route.path] ??= {});
    item[route.method.toLowerCase()] = operation(route);
    if (route.method === 'GET') item.head = headOperation(route, item.get as JsonObject);
  }
  const schemas: JsonObject = {};
  for (const [name, { schema, io }] of Object.entries(COMPONENT_SCHEMAS))
    schemas[name] = jsonSchemaOf(schema, io);
  const tags = [
    ...new Set(
      routes.map(
        (route) => OPERATION_DOCS[route.name]?.tag ?? (route.access === 'admin' ? 'Admin' : 'Search'),
      ),
    ),
  ];
  return {
    openapi: '3.1.0',
    jsonSchemaDialect: 'https://json-schema.org/draft/2020-12/schema',
    info: {
      title: 'Visual product search',
      version: '1.0.0',
      summary: 'Image search, object detection and related products over customer product feeds.',
      description: [
        'All bodies are JSON. Public endpoints authenticate with a search id (API key): `Authorization: Bearer <searchId>` or the body field `searchId` (`feedId` on the root search); both present and different → 400.',
        'Every public response that read the allowance carries `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset`: a 429 (not counted against it), and any answer to a request that passed the search id, domain and limit checks (200, and the 400, 404 and 422 of its content); a 429 also carries `Retry-After`. 401, 403, 413 and 415, and a 400 for a body that is not JSON or names two search ids, carry none. Limits per rolling hour: free 100, pro 1,000, enterprise custom. Requests are counted in 5-minute steps: each one weighs on the limit for 60 to 65 minutes, so no 60-minute span admits more than the limit.',
        'Every non-2xx response has the body `{"error": {"status", "code", "message", "details"}, "requestId"}`; the request id is also in `X-Request-Id`. A 401 names its scheme in `WWW-Authenticate`. An unknown path answers 404 `not_found`, a wrong method 405 `method_not_allowed` with `Allow`.',
        `Every answer from an operation's handler carries \`Vary: ${VARY}\`: it names the calling origin, and from 1 KB it is compressed for a client that accepts it. Answers given before a handler runs allow any origin, \`*\`, are not compressed and carry no \`Vary\` (the same answer for every origin): the CORS preflight and the gateway's own errors, and locally the server's own, as the gateway's (404 for an unknown path, 405 for a wrong method, 413 for an over-size body, and the 400 or 415 of a body that is not UTF-8). On the admin API the gateway's and the local server's own errors carry no CORS headers.`,
        'The admin API (`/admin/v1`) serves the dashboard and scripts; it takes the admin token as a bearer token.',
        "Every GET operation also answers HEAD: the same status and headers, `Content-Encoding` included (the coding the GET's answer gets), without the body; `Content-Length` may be left out (RFC 9110 §9.3.2).",
      ].join('\n\n'),
    },
    servers: [{ url: options.serverUrl ?? '/', description: 'This server' }],
    tags: tags.map((name) => ({ name })),
    paths,
    components: {
      schemas,
      securitySchemes: {
        searchId: {
          type: 'http',
          scheme: 'bearer',
          bearerFormat: 'search id',
          description:
            'The search id of a feed (Settings > API Keys). May instead be sent in the body field searchId (feedId on the root search).',
        },
        adminToken: {
          type: 'http',
          scheme: 'bearer',
          bearerFormat: 'admin token',
          description:
            'The operator token (local mode prints it at start; AWS protects the admin routes with IAM).',
        },
      },
      headers: {
        'RateLimit-Limit': {
          description: 'Requests allowed per rolling hour for this search id.',
          schema: { type: 'integer', minimum: 0 },
          example: 1000,
        },
        'RateLimit-Remaining': {
          description:
            'Requests left: the limit minus the requests counted (those of the last 60 to 65 minutes).',
          schema: { type: 'integer', minimum: 0 },
          example: 998,
        },
        'RateLimit-Reset': {
          description:
            'Seconds until the allowance is fully available again: requests are counted in 5-minute steps, and each weighs on the limit until the 12th step after its own ends (60 to 65 minutes). On a 429 it is never earlier than Retry-After.',
          schema: { type: 'integer', minimum: 0 },
          example: 3840,
        },
        ETag: {
          description:
            "The feed's version (a strong entity tag; it changes with every change of the feed). Send it as If-Match to change only that version.",
          schema: { type: 'string' },
          example: EXAMPLE_ETAG,
        },
        [ORIGINAL_REQUEST_HEADER]: {
          description:
            'On an answer given again (Idempotent-Replayed): the X-Request-Id of the request that made it.',
          schema: { type: 'string' },
          example: EXAMPLE_REQUEST_ID,
        },
        [REPLAYED_HEADER]: {
          description:
            'Present (`true`) when the answer is the kept one of an earlier request with the same Idempotency-Key.',
          schema: { type: 'string', enum: ['true'] },
          example: 'true',
        },
        'Retry-After': {
          description: 'Seconds to wait before retrying (429, 503, and 409 `idempotency_key_in_use`).',
          schema: { type: 'integer', minimum: 0 },
          example: 1200,
        },
        Vary: {
          description: `\`${VARY}\` on every answer of the handlers, compressed or not, with an Origin or without (they name the calling origin, and may be compressed): a shared cache keeps one answer per origin and coding. Answers given before a handler runs (a 413) carry none: they allow any origin and are not compressed.`,
          schema: { type: 'string' },
          example: VARY,
        },
        'WWW-Authenticate': {
          description: `The scheme a 401 asks for: \`${authenticationChallenge('missing_search_id', false)}\` without a search id, \`${authenticationChallenge('invalid_search_id', false)}\` for an unknown one; \`${authenticationChallenge('unauthorized', true)}\` on the admin API with an admin token (local mode; deployed, the admin API takes IAM-signed requests and its 401 names no scheme). Deployed, API Gateway may pass the handlers' header on as \`x-amzn-Remapped-WWW-Authenticate\`; its own 401 for an unknown search id carries it as is.`,
          schema: { type: 'string' },
          example: authenticationChallenge('invalid_search_id', false),
        },
        'X-Request-Id': {
          description: 'Id of this request; equals requestId in error bodies.',
          schema: { type: 'string' },
          example: EXAMPLE_REQUEST_ID,
        },
      },
    },
  };
}
