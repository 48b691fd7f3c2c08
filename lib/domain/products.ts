import { createHash } from 'node:crypto';
import { FILTER_KEYS } from '#lib/domain/schemas.ts';

/**
 * Products as the service stores them and as each public endpoint shows them. Field names follow the
 * interface document (snake_case). One product per (feed_id, product_id); variants share an item group.
 */
export const AVAILABILITY = ['in_stock', 'out_of_stock', 'preorder', 'backorder'] as const;
export type Availability = (typeof AVAILABILITY)[number];

/** What a feed says about a product, normalised; the input of update_hash. */
export interface ProductContent {
  product_id: string;
  /** As given by the feed; '' when absent (the product is then its own group). */
  item_group_id: string;
  title: string;
  short_title: string;
  description: string;
  age_group: string;
  availability: Availability;
  brand: string;
  color: string;
  condition: string;
  gender: string;
  category: string;
  product_type: string;
  gtin: string;
  mpn: string;
  material: string;
  size: string;
  image_link: string;
  additional_image_links: string[];
  sb_image_url: string;
  link: string;
  /** Integer minor units (cents); null when the feed gives none. */
  price: number | null;
  sale_price: number | null;
  currency: string;
  shipping_price: number | null;
  shipping_currency: string;
  shipping_country: string;
  shipping_weight: string;
  product_highlight: string[];
  metadata: Record<string, string>;
  product_updated_at: string;
}

/** A stored product: the feed's content plus what the service keeps about it. */
export interface Product extends ProductContent {
  feed_id: string;
  /** UUID, stable across updates of the same (feed_id, product_id). */
  id: string;
  /** item_group_id, or product_id when the feed gives none. */
  group: string;
  /** contentHash of its content; '' while an import rewrites its vectors (a stale mark, see stale_hash). */
  update_hash: string;
  /**
   * On a stale mark only: the update_hash the record had before it was marked, so that the import that
   * redoes it tells a change of content (version, updated_at) from none.
   */
  stale_hash?: string;
  /** 1 on creation, +1 on every change of content. */
  version: number;
  created_at: string;
  updated_at: string;
  /** Embedding model version of the stored vectors; absent until the images are embedded. */
  embedded_model?: string;
  /** Number of images with a stored vector (documents `${feed}/${product}/${0..n-1}`). */
  vector_count: number;
  /**
   * Recipe version of the local features stored for its images (ObjectStore `features/…`,
   * `CATALOGUE_FEATURES_VERSION`), set once the import tried to extract them; absent for products
   * imported before local features existed.
   */
  local_features?: number;
  /**
   * Version of the visual words indexed for its images (`VISUAL_WORDS_VERSION`), set with its local
   * features when a word index is configured; absent for products imported before.
   */
  visual_words?: number;
  /** The last import that listed this product, and the row it was on. */
  seen_import?: string;
  seen_row?: number;
}

/** At most this many images of a product are embedded: image_link and the first additional images. */
export const MAX_IMAGES_PER_PRODUCT = 3;

export function groupOf(content: Pick<ProductContent, 'item_group_id' | 'product_id'>): string {
  return content.item_group_id || content.product_id;
}

/** Hash of the normalised content (key order fixed), so unchanged products are recognised on re-import. */
export function contentHash(content: ProductContent): string {
  return createHash('sha256').update(stableJson(content)).digest('hex').slice(0, 32);
}

function stableJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(stableJson).join(',')}]`;
  if (value && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${stableJson(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

/** The images of a product that are embedded, main image first. */
export function imagesOf(content: Pick<ProductContent, 'image_link' | 'additional_image_links'>): string[] {
  return [content.image_link, ...content.additional_image_links].slice(0, MAX_IMAGES_PER_PRODUCT);
}

export function vectorDocumentId(feedId: string, productId: string, imageIndex: number): string {
  return `${feedId}/${productId}/${imageIndex}`;
}

/** Lower-cased, trimmed filter value; availability accepts both "in stock" and "in_stock"; paths are canonical. */
export function filterValue(key: string, value: string): string {
  const v = value.trim().toLowerCase();
  if (key === 'availability') return v.replace(/[\s-]+/g, '_');
  // Taxonomy paths compare with one canonical separator: "A>B" and "A  >  B" are "a > b".
  if (key === 'category' || key === 'product_type') {
    return v
      .split('>')
      .map((part) => part.trim())
      .filter(Boolean)
      .join(' > ');
  }
  return v;
}

const PATH_FIELDS = new Set(['category', 'product_type']);
/** The filterable product fields; item_group_id is filed from the product's group instead. */
const FILTER_FIELDS = FILTER_KEYS.filter((key) => key !== 'item_group_id');

/**
 * Filterable fields of a product's vector documents, values lower-cased. Taxonomy paths ("A > B > C")
 * are indexed with each of their prefixes, so a filter or context category "A > B" also matches "A > B > C".
 */
export function filterFieldsOf(product: Product): Record<string, string[]> {
  const fields: Record<string, string[]> = { item_group_id: [filterValue('item_group_id', product.group)] };
  for (const key of FILTER_FIELDS) {
    const raw = String(product[key] ?? '');
    if (!raw) continue;
    if (PATH_FIELDS.has(key)) {
      const parts = raw
        .split('>')
        .map((part) => part.trim())
        .filter(Boolean);
      fields[key] = parts.map((_, i) => filterValue(key, parts.slice(0, i + 1).join(' > ')));
    } else {
      fields[key] = [filterValue(key, raw)];
    }
  }
  for (const [name, value] of Object.entries(product.metadata)) {
    if (value) fields[`metadata.${name}`] = [filterValue(name, value)];
  }
  return fields;
}

/** availability as related products and the root search show it: "in stock". */
export function availabilityText(availability: Availability): string {
  return availability.replace(/_/g, ' ');
}

/** Fields every search response shows, in the image-search form. */
function commonFields(p: Product) {
  return {
    feed_id: p.feed_id,
    item_group_id: p.group,
    product_id: p.product_id,
    title: p.title,
    short_title: p.short_title,
    description: p.description,
    age_group: p.age_group,
    availability: p.availability as string,
    brand: p.brand,
    color: p.color,
    condition: p.condition,
    gender: p.gender,
    category: p.category,
    product_type: p.product_type,
    gtin: p.gtin,
    mpn: p.mpn,
    material: p.material,
    size: p.size,
    image_link: p.image_link,
    link: p.link,
    price: p.price,
    sale_price: p.sale_price,
    currency: p.currency,
    shipping_price: p.shipping_price,
    shipping_currency: p.shipping_currency,
    shipping_country: p.shipping_country,
    shipping_weight: p.shipping_weight,
    product_updated_at: p.product_updated_at,
  };
}

function variantFields(p: Product) {
  return {
    product_id: p.product_id,
    color: p.color,
    size: p.size,
    price: p.price,
    sale_price: p.sale_price,
    currency: p.currency,
    image_link: p.image_link,
    availability: p.availability as string,
    link: p.link,
  };
}

/** A search hit: the best-matching product of an item group, all products of the group, its score. */
export interface GroupHit {
  product: Product;
  variants: Product[];
  score: number;
}

/** Image search (and detect OD+SEARCH): availability in_stock/out_of_stock, product_highlight an array. */
export function imageSearchItem(hit: GroupHit) {
  return {
    ...commonFields(hit.product),
    product_highlight: hit.product.product_highlight,
    score: hit.score,
    variants: hit.variants.map(variantFields),
    variant_count: hit.variants.length,
  };
}

/** Related products: adds id, metadata, update_hash, timestamps, version; text availability, string highlight. */
export function relatedItem(hit: GroupHit) {
  const p = hit.product;
  return {
    id: p.id,
    ...commonFields(p),
    availability: availabilityText(p.availability),
    additional_image_links: p.additional_image_links.join(','),
    sb_image_url: p.sb_image_url,
    product_highlight: p.product_highlight.join(', '),
    metadata: p.metadata,
    score: hit.score,
    update_hash: p.update_hash,
    created_at: p.created_at,
    updated_at: p.updated_at,
    version: p.version,
    variants: hit.variants.map((v) => ({
      id: v.id,
      item_group_id: v.group,
      ...variantFields(v),
      additional_image_links: v.additional_image_links.join(','),
      availability: availabilityText(v.availability),
      metadata: v.metadata,
    })),
    variant_count: hit.variants.length,
  };
}

const money = (cents: number | null) => (cents === null ? '' : String(cents));

/**
 * Root search: prices as strings, id and timestamps, text availability, string highlight, and the
 * empty-named property of the interface's example, which carries the score as a string.
 */
export function rootSearchItem(hit: GroupHit) {
  const p = hit.product;
  return {
    id: p.id,
    ...commonFields(p),
    availability: availabilityText(p.availability),
    price: money(p.price),
    sale_price: money(p.sale_price),
    shipping_price: money(p.shipping_price),
    product_highlight: p.product_highlight.join(', '),
    created_at: p.created_at,
    updated_at: p.updated_at,
    variant_count: hit.variants.length,
    '': hit.score.toFixed(6),
  };
}

/** The admin products browser: every stored field. */
export function adminProductView(p: Product) {
  const {
    seen_import: _seenImport,
    seen_row: _seenRow,
    stale_hash: _staleHash,
    local_features: _localFeatures,
    visual_words: _visualWords,
    ...rest
  } = p;
  return rest;
}
