import type { RawFields } from '#lib/domain/catalogue/feed-formats.ts';
import { AVAILABILITY, type Availability, type ProductContent } from '#lib/domain/products.ts';
import { MAX_PRODUCT_ID_LENGTH } from '#lib/domain/schemas.ts';
import { toWellFormed } from '#lib/domain/validation.ts';

/**
 * Text as the stores can keep it: lone surrogates (a JSON feed may escape one, "\ud800"; a cut at a
 * length limit may halve a pair) become U+FFFD, as String.prototype.toWellFormed does.
 */
export function wellFormed(text: string): string {
  return toWellFormed(text);
}

/**
 * A refused row's id as its import error names it: well-formed and at most MAX_PRODUCT_ID_LENGTH long
 * (the raw id may be neither, and the errors are stored in the import record).
 */
export function errorProductId(id: string | number): string {
  const text = String(id);
  const shown = text.length > MAX_PRODUCT_ID_LENGTH ? `${text.slice(0, MAX_PRODUCT_ID_LENGTH - 1)}…` : text;
  return wellFormed(shown);
}

/** A feed's value quoted in a row error: its start only (a value may be megabytes), as well-formed text. */
function quote(value: string | number): string {
  const text = String(value);
  return `"${wellFormed(text.length > 60 ? `${text.slice(0, 59)}…` : text)}"`;
}

/**
 * Whether an import error's message is a note normaliseRecord gave about a product it imported (a
 * metadata field left out), rather than a row's failure: a resumed run counts the notes already recorded
 * instead of noting the same field again.
 */
export function isImportNote(message: string): boolean {
  // (s: a quoted name may hold a line break.)
  return /^metadata .* not kept[.:]/s.test(message);
}

/** Why one row of a feed was not imported; the message is shown in the import's errors. */
export class RowError extends Error {
  override name = 'RowError';
}

/** Longest price text read ("USD 1,234,567,890.00" is 20): longer ones are a row error before parsing. */
const MAX_PRICE_TEXT = 64;

/** Currencies without minor units: "1500 JPY" is 1500, not 150000. */
const ZERO_DECIMAL = new Set([
  'BIF',
  'CLP',
  'DJF',
  'GNF',
  'ISK',
  'JPY',
  'KMF',
  'KRW',
  'PYG',
  'RWF',
  'UGX',
  'VND',
  'VUV',
  'XAF',
  'XOF',
  'XPF',
]);
const THREE_DECIMAL = new Set(['BHD', 'IQD', 'JOD', 'KWD', 'LYD', 'OMR', 'TND']);

function minorDigits(currency: string): number {
  if (ZERO_DECIMAL.has(currency)) return 0;
  if (THREE_DECIMAL.has(currency)) return 3;
  return 2;
}

/**
 * A price as integer minor units plus its currency. Strings are amounts in major units with an optional
 * ISO currency before or after ("12.99 USD", "USD 12.99", "1,299.00 EUR", "12,99 EUR"); JSON numbers are
 * already minor units (the interface's integer cents) and must be whole.
 */
export function parsePrice(
  value: string | number,
  fallbackCurrency: string,
  field: string,
): { cents: number; currency: string } {
  if (typeof value === 'number') {
    if (!Number.isInteger(value) || value < 0) {
      throw new RowError(`${field} as a JSON number must be whole minor units (cents), got ${value}.`);
    }
    if (!Number.isSafeInteger(value)) throw new RowError(`${field} ${value} is out of range.`);
    return { cents: value, currency: fallbackCurrency };
  }
  // Trimmed and bounded before the pattern, whose optional spaces backtrack in cubic time on a long
  // value (a 6 KB price held the whole local server for 24 s); padding around a price is not its length.
  const text = value.trim();
  if (text.length > MAX_PRICE_TEXT)
    throw new RowError(`${field} is longer than ${MAX_PRICE_TEXT} characters.`);
  const match = /^(?:([A-Za-z]{3})\s*)?([0-9][0-9.,\s]*?)\s*(?:([A-Za-z]{3}))?$/.exec(text);
  if (!match || (match[1] && match[3]))
    throw new RowError(`${field} ${quote(value)} is not a price like "12.99 USD".`);
  const currency = (match[1] ?? match[3] ?? fallbackCurrency).toUpperCase();
  let amount = match[2]!.replace(/\s/g, '');
  if (/^\d{1,3}(,\d{3})+(\.\d+)?$/.test(amount)) amount = amount.replace(/,/g, '');
  else if (/^\d{1,3}(\.\d{3})+,\d+$|^\d{1,3}(\.\d{3}){2,}$/.test(amount))
    amount = amount.replace(/\./g, '').replace(',', '.');
  else if (/^\d+,\d{1,3}$/.test(amount)) amount = amount.replace(',', '.');
  if (!/^\d+(\.\d+)?$/.test(amount))
    throw new RowError(`${field} ${quote(value)} is not a price like "12.99 USD".`);
  const digits = minorDigits(currency);
  const [whole, fraction = ''] = amount.split('.');
  const padded = `${fraction}${'0'.repeat(digits + 1)}`;
  // Round half up on the first dropped digit, in integers so 0.1 + 0.2 never leaks in.
  let cents = Number(whole) * 10 ** digits + Number(padded.slice(0, digits) || '0');
  if (Number(padded[digits]) >= 5) cents += 1;
  if (!Number.isSafeInteger(cents)) throw new RowError(`${field} ${quote(value)} is out of range.`);
  return { cents, currency };
}

const AVAILABILITY_ALIASES: Record<string, Availability> = {
  in_stock: 'in_stock',
  instock: 'in_stock',
  available: 'in_stock',
  out_of_stock: 'out_of_stock',
  outofstock: 'out_of_stock',
  sold_out: 'out_of_stock',
  preorder: 'preorder',
  pre_order: 'preorder',
  backorder: 'backorder',
  back_order: 'backorder',
};

export function parseAvailability(value: string | undefined): Availability {
  if (value === undefined || value.trim() === '') return 'in_stock';
  const key = value
    .trim()
    .toLowerCase()
    .replace(/^https?:\/\/schema\.org\//, '')
    .replace(/[\s-]+/g, '_');
  const found = AVAILABILITY_ALIASES[key];
  if (!found) throw new RowError(`availability ${quote(value)} is not one of ${AVAILABILITY.join(', ')}.`);
  return found;
}

function absoluteUrl(value: string, base: string | undefined, field: string): string {
  if (value.length > MAX_URL) throw new RowError(`${field} is longer than ${MAX_URL} characters.`);
  let url: URL;
  try {
    url = new URL(value, base);
  } catch {
    throw new RowError(`${field} ${quote(value)} is not a URL.`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new RowError(`${field} must be an http(s) URL.`);
  return url.href;
}

const MAX_TEXT = 5000;
const MAX_URL = 2048;
/** Merchant Center reads up to 10 additional images; the rest are left out here too. */
const MAX_ADDITIONAL_IMAGES = 10;
/** Highlights kept per product (Merchant Center: up to 100 of up to 150 characters). */
const MAX_HIGHLIGHTS = 100;
const MAX_HIGHLIGHT = 500;
/** Metadata fields kept per product, in the feed's order. */
const MAX_METADATA = 100;
/**
 * Longest product id once URL-encoded: it names the product's stored features (a path segment of their
 * object key, one file name in local mode, where names stop at 255 bytes).
 */
const MAX_ENCODED_ID = 240;
/**
 * Largest product, as JSON: its store record must stay well under DynamoDB's 400 KB item limit, with the
 * record's own fields added.
 */
const MAX_PRODUCT_BYTES = 128 * 1024;

/**
 * Turns one raw feed record into product content. Merchant Center names (id, google_product_category,
 * additional_image_link, shipping, custom_label_N) and the interface's names (product_id, category,
 * additional_image_links, shipping_price, metadata.<name>) are both accepted. Relative links are resolved
 * against `baseUrl` (the feed's URL). Throws RowError naming the first problem.
 */
export function normaliseRecord(
  fields: RawFields,
  baseUrl?: string,
  /** Receives what is left out of an imported product without refusing it (a metadata field). */
  notes?: string[],
): ProductContent {
  const text = (...names: string[]) =>
    names
      .flatMap((name) => fields[name] ?? [])
      .map((v) => String(v).trim())
      .filter(Boolean);
  const all = (...names: string[]) => text(...names).map(wellFormed);
  const one = (...names: string[]) => wellFormed((text(...names)[0] ?? '').slice(0, MAX_TEXT));
  const raw = (...names: string[]) =>
    names.map((name) => fields[name]?.[0]).find((v) => v !== undefined && v !== '');

  // The id is kept exactly, so an id that is not text (a lone surrogate) is the row's error, and so is a
  // JSON number whose digits are not kept (12345678901234567891 reads as 12345678901234567000, the id of
  // another product; 0.10 as 0.1).
  const idValue = ['id', 'product_id', 'offer_id']
    .flatMap((name) => fields[name] ?? [])
    .find((value) => String(value).trim() !== '');
  if (typeof idValue === 'number' && !Number.isSafeInteger(idValue))
    throw new RowError(
      `id (product_id) as a JSON number must be whole and at most ${Number.MAX_SAFE_INTEGER} (a longer one loses digits): send it as a string.`,
    );
  const productId = (idValue === undefined ? '' : String(idValue).trim()).slice(0, MAX_TEXT);
  if (!productId) throw new RowError('id (product_id) is missing.');
  if (wellFormed(productId) !== productId)
    throw new RowError('id (product_id) is not valid Unicode text (it has a lone surrogate).');
  if (productId.length > MAX_PRODUCT_ID_LENGTH)
    throw new RowError(`id (product_id) is longer than ${MAX_PRODUCT_ID_LENGTH} characters.`);
  if (encodeURIComponent(productId).length > MAX_ENCODED_ID)
    throw new RowError(`id (product_id) is longer than ${MAX_ENCODED_ID} characters once URL-encoded.`);
  const title = one('title');
  if (!title) throw new RowError('title is missing.');
  const imageLinkRaw = one('image_link');
  if (!imageLinkRaw) throw new RowError('image_link is missing.');
  const imageLink = absoluteUrl(imageLinkRaw, baseUrl, 'image_link');
  const linkRaw = one('link');
  const additional = all('additional_image_link', 'additional_image_links')
    .flatMap((value) => value.split(','))
    .map((value) => value.trim())
    .filter(Boolean)
    .slice(0, MAX_ADDITIONAL_IMAGES)
    .map((value) => absoluteUrl(value, baseUrl, 'additional_image_link'));

  let currency = one('currency').toUpperCase();
  const priceRaw = raw('price');
  const price = priceRaw === undefined ? undefined : parsePrice(priceRaw, currency, 'price');
  if (price) currency = price.currency;
  const saleRaw = raw('sale_price');
  const sale = saleRaw === undefined ? undefined : parsePrice(saleRaw, currency, 'sale_price');
  if (price && sale && sale.currency !== price.currency)
    throw new RowError('sale_price is in another currency than price.');
  currency ||= sale?.currency ?? '';

  // Shipping: g:shipping children, the TSV form "country:region:service:price", or the interface's flat fields.
  let shippingCountry = one('shipping.country', 'shipping_country');
  let shippingPriceRaw = raw('shipping.price', 'shipping_price');
  const shippingCell = one('shipping');
  if (shippingCell) {
    const parts = shippingCell.split(':');
    shippingCountry ||= parts[0]?.trim() ?? '';
    shippingPriceRaw ??= parts[parts.length - 1]?.trim() || undefined;
  }
  const shippingFallbackCurrency = one('shipping_currency').toUpperCase() || currency;
  const shipping =
    shippingPriceRaw === undefined
      ? undefined
      : parsePrice(shippingPriceRaw, shippingFallbackCurrency, 'shipping price');

  // Collected in a Map: assigned to a plain object, a key `__proto__` called the prototype's setter,
  // which ignores a string, and the key was gone without a word. fromEntries makes it an own key.
  const metadata = new Map<string, string>();
  let pastTheCap = false;
  for (const [name, values] of Object.entries(fields)) {
    const key = name.startsWith('metadata.')
      ? name.slice('metadata.'.length)
      : /^custom_label_\d$/.test(name)
        ? name
        : undefined;
    const value = values[0] === undefined ? '' : String(values[0]).trim();
    // (An empty value is nothing to keep: a CSV's blank cell, no note.)
    if (key === undefined || !value) continue;
    if (!/^[A-Za-z0-9_-]{1,64}$/.test(key))
      notes?.push(`metadata ${quote(key)} is not kept: a metadata name is 1–64 letters, digits, "_" or "-".`);
    else if (metadata.size >= MAX_METADATA) pastTheCap = true;
    else metadata.set(key, wellFormed(value.slice(0, 500)));
  }
  // (One text whatever the number past the cap: notes are told apart by their text, see isImportNote.)
  if (pastTheCap) notes?.push(`metadata fields past the ${MAX_METADATA}th are not kept.`);

  // An id as a product's is: DynamoDB keys the product's item group index by feed id + group, and a
  // partition key holds 2048 bytes (a longer one refused the chunk's whole batch). 200 characters are at
  // most 800 bytes of UTF-8; Merchant Center's own limit is 50.
  const itemGroupId = one('item_group_id');
  if (itemGroupId.length > MAX_PRODUCT_ID_LENGTH)
    throw new RowError(`item_group_id is longer than ${MAX_PRODUCT_ID_LENGTH} characters.`);

  const product: ProductContent = {
    product_id: productId,
    item_group_id: itemGroupId,
    title,
    short_title: one('short_title'),
    description: one('description'),
    age_group: one('age_group').toLowerCase(),
    availability: parseAvailability(one('availability') || undefined),
    brand: one('brand'),
    color: one('color'),
    condition: one('condition').toLowerCase(),
    gender: one('gender').toLowerCase(),
    category: one('category', 'google_product_category'),
    product_type: one('product_type'),
    gtin: one('gtin'),
    mpn: one('mpn'),
    material: one('material'),
    size: one('size'),
    image_link: imageLink,
    additional_image_links: additional,
    sb_image_url: one('sb_image_url'),
    link: linkRaw ? absoluteUrl(linkRaw, baseUrl, 'link') : '',
    price: price?.cents ?? null,
    sale_price: sale?.cents ?? null,
    currency,
    shipping_price: shipping?.cents ?? null,
    shipping_currency: shipping ? shipping.currency : '',
    shipping_country: shippingCountry,
    shipping_weight: one('shipping_weight'),
    product_highlight: all('product_highlight')
      .slice(0, MAX_HIGHLIGHTS)
      .map((highlight) => wellFormed(highlight.slice(0, MAX_HIGHLIGHT))),
    metadata: Object.fromEntries(metadata),
    product_updated_at: one('product_updated_at', 'updated'),
  };
  if (Buffer.byteLength(JSON.stringify(product)) > MAX_PRODUCT_BYTES)
    throw new RowError(`the product's fields add up to more than ${MAX_PRODUCT_BYTES / 1024} KB.`);
  return product;
}
