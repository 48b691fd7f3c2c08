import { ApiError, type Product } from './api.ts';

/** DOM helpers: elements are built with textContent only, so API data is never parsed as HTML. */
type Child = Node | string | number | null | undefined | false;
type Attrs = Record<string, string | number | boolean | EventListener | undefined | null>;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs = {},
  ...children: (Child | Child[])[]
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (typeof value === 'function') element.addEventListener(name.replace(/^on/, ''), value);
    else if (value === true) element.setAttribute(name, '');
    else element.setAttribute(name, String(value));
  }
  append(element, children);
  return element;
}

export function append(parent: Element, children: (Child | Child[])[]): void {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(child instanceof Node ? child : String(child));
  }
}

export function replace(parent: Element, ...children: (Child | Child[])[]): void {
  parent.replaceChildren();
  append(parent, children);
}

let toastTimer: number | undefined;
/** A short polite announcement (copied, saved). */
export function toast(message: string): void {
  const element = document.getElementById('toast');
  if (!element) return;
  element.textContent = message;
  element.classList.add('visible');
  window.clearTimeout(toastTimer);
  toastTimer = window.setTimeout(() => element.classList.remove('visible'), 3000);
}

/** An API error with its code, message, field details and request id. */
export function errorBox(error: unknown, context?: string): HTMLElement {
  if (error instanceof ApiError) {
    return h(
      'div',
      { class: 'alert error', role: 'alert', 'data-code': error.code },
      h('p', {}, h('strong', {}, context ? `${context}: ` : ''), error.message),
      error.details.length > 0
        ? h(
            'ul',
            {},
            error.details.map((d) => h('li', {}, h('code', {}, d.path), ` ${d.message}`)),
          )
        : null,
      h(
        'p',
        { class: 'meta' },
        `${error.status || 'no answer'} ${error.code}`,
        error.requestId ? [' · request id ', h('code', { class: 'request-id' }, error.requestId)] : null,
      ),
    );
  }
  return h(
    'div',
    { class: 'alert error', role: 'alert' },
    h('p', {}, context ? `${context}: ` : '', error instanceof Error ? error.message : String(error)),
  );
}

/** The clear message for a part of the service that this server does not offer yet (404/405/503). */
export function unavailableBox(what: string, error: ApiError): HTMLElement {
  const reason =
    error.status === 503
      ? `${what} is temporarily unavailable: ${error.message}`
      : `${what} is not available on this server yet (the endpoint answered ${error.status} ${error.code}).`;
  return h(
    'div',
    { class: 'alert info', role: 'status', 'data-code': error.code },
    h('p', {}, reason),
    h(
      'p',
      { class: 'meta' },
      error.requestId ? ['request id ', h('code', { class: 'request-id' }, error.requestId)] : null,
    ),
  );
}

export function formatPrice(price: number | string | undefined, currency: string | undefined): string {
  if (price === undefined || price === '') return '';
  const cents = typeof price === 'number' ? price : Number(price);
  if (!Number.isFinite(cents)) return String(price);
  try {
    return new Intl.NumberFormat(undefined, { style: 'currency', currency: currency || 'USD' }).format(
      cents / 100,
    );
  } catch {
    return `${(cents / 100).toFixed(2)} ${currency ?? ''}`.trim();
  }
}

export function formatDate(value: string | undefined): string {
  if (!value) return 'never';
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? value : date.toLocaleString();
}

/** One product card: image, title, price and (search results) score. */
export function productCard(product: Product): HTMLElement {
  const title = product.title || product.product_id || 'Untitled product';
  const price = formatPrice(product.sale_price ?? product.price, product.currency);
  const regular =
    product.sale_price !== undefined && product.price !== undefined
      ? formatPrice(product.price, product.currency)
      : '';
  return h(
    'li',
    { class: 'card product' },
    product.image_link
      ? h('img', { src: product.image_link, alt: title, loading: 'lazy', referrerpolicy: 'no-referrer' })
      : h('div', { class: 'noimage', 'aria-hidden': 'true' }, 'no image'),
    h(
      'div',
      { class: 'card-body' },
      h(
        'h3',
        { class: 'title' },
        product.link
          ? h('a', { href: product.link, target: '_blank', rel: 'noopener noreferrer' }, title)
          : title,
      ),
      h('p', { class: 'price' }, price, regular && regular !== price ? [' ', h('s', {}, regular)] : null),
      h(
        'p',
        { class: 'meta' },
        product.product_id ? h('code', {}, product.product_id) : null,
        product.variant_count && product.variant_count > 1 ? ` · ${product.variant_count} variants` : null,
      ),
      product.score !== undefined ? h('p', { class: 'score' }, `score ${product.score.toFixed(3)}`) : null,
    ),
  );
}

/** Copies text; falls back to a hidden textarea where the async clipboard is unavailable. */
export async function copyText(text: string): Promise<void> {
  try {
    await navigator.clipboard.writeText(text);
    return;
  } catch {
    const area = h('textarea', { class: 'visually-hidden', 'aria-hidden': 'true' });
    area.value = text;
    document.body.append(area);
    area.select();
    const ok = document.execCommand('copy');
    area.remove();
    if (!ok) throw new Error('The browser refused to copy; select the key and copy it by hand.');
  }
}
