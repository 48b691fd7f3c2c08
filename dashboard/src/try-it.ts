import {
  ApiError,
  type DetectedObject,
  type DetectResponse,
  type Product,
  type RateLimit,
  type SearchKey,
  search,
} from './api.ts';
import { errorBox, h, productCard, replace, unavailableBox } from './dom.ts';

/**
 * "Try it": pick or drop an image → image search and object detection with one of the feed's search ids.
 * Detected objects are drawn as boxes (buttons, so the keyboard reaches them); choosing one crops that
 * region client-side with a canvas and searches the crop.
 */
const MAX_SIDE = 1280;

interface Prepared {
  canvas: HTMLCanvasElement;
  dataUrl: string;
}

/** Decodes the file (EXIF orientation applied by the browser) and re-encodes it at most MAX_SIDE wide. */
async function prepare(file: Blob): Promise<Prepared> {
  const bitmap = await createImageBitmap(file).catch(() => {
    throw new Error('This file is not an image the browser can read (try JPEG, PNG or WebP).');
  });
  const scale = Math.min(1, MAX_SIDE / Math.max(bitmap.width, bitmap.height));
  const canvas = document.createElement('canvas');
  canvas.width = Math.max(1, Math.round(bitmap.width * scale));
  canvas.height = Math.max(1, Math.round(bitmap.height * scale));
  canvas.getContext('2d')!.drawImage(bitmap, 0, 0, canvas.width, canvas.height);
  bitmap.close();
  return { canvas, dataUrl: canvas.toDataURL('image/jpeg', 0.92) };
}

/** Where a box's label may go, tried in this order: above its top-left corner first, as drawn before. */
const LABEL_PLACES = (['above', 'inside', 'below', 'inside-bottom'] as const).flatMap((y) =>
  (['start', 'end'] as const).map((x) => ({ y, x })),
);

const overlap = (a: DOMRect, b: DOMRect) =>
  a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;

/**
 * Puts each box's label (best score first) in the first place that overlaps no label placed before it
 * and stays on the image: boxes sharing a corner (a person and the bag they hold, a shelf and its first
 * item) had their labels drawn on one another, and a box at the image's top had its label above it.
 */
function placeLabels(overlay: HTMLElement): void {
  const bounds = overlay.getBoundingClientRect();
  const onImage = (r: DOMRect) =>
    r.left >= bounds.left && r.right <= bounds.right && r.top >= bounds.top && r.bottom <= bounds.bottom;
  const placed: DOMRect[] = [];
  const boxes = [...overlay.querySelectorAll<HTMLElement>('.box')].sort(
    (a, b) => Number(a.dataset.index) - Number(b.dataset.index),
  );
  for (const box of boxes) {
    const label = box.querySelector<HTMLElement>('.box-label');
    if (!label) continue;
    const tried = LABEL_PLACES.map((place) => {
      label.dataset.y = place.y;
      label.dataset.x = place.x;
      return { place, rect: label.getBoundingClientRect() };
    });
    const free = tried.filter(({ rect }) => !placed.some((other) => overlap(other, rect)));
    // Free and on the image, else free, else on the image (an overlap the image has no room to avoid).
    const chosen =
      free.find(({ rect }) => onImage(rect)) ?? free[0] ?? tried.find(({ rect }) => onImage(rect));
    const { place, rect } = chosen ?? tried[0]!;
    label.dataset.y = place.y;
    label.dataset.x = place.x;
    placed.push(rect);
  }
}

function crop(source: HTMLCanvasElement, box: [number, number, number, number]): string {
  const [x1, y1, x2, y2] = box.map((v) => Math.round(v)) as [number, number, number, number];
  const x = Math.max(0, Math.min(x1, source.width - 1));
  const y = Math.max(0, Math.min(y1, source.height - 1));
  const w = Math.max(1, Math.min(x2, source.width) - x);
  const hgt = Math.max(1, Math.min(y2, source.height) - y);
  const canvas = document.createElement('canvas');
  canvas.width = w;
  canvas.height = hgt;
  canvas.getContext('2d')!.drawImage(source, x, y, w, hgt, 0, 0, w, hgt);
  return canvas.toDataURL('image/jpeg', 0.92);
}

export function tryItView(
  feedDomains: string[],
  keys: SearchKey[],
  createKey: () => Promise<void>,
): HTMLElement {
  const live = keys.filter((key) => !key.revokedAt);
  const root = h(
    'section',
    { class: 'try-it', 'aria-labelledby': 'try-h' },
    h('h2', { id: 'try-h' }, 'Try it'),
  );
  if (live.length === 0) {
    const status = h('div');
    const create = h('button', { type: 'button', class: 'primary' }, 'Create a search id for testing');
    create.addEventListener('click', async () => {
      create.disabled = true;
      try {
        await createKey();
      } catch (error) {
        // Not an unhandled rejection: the click would otherwise seem to do nothing.
        replace(status, errorBox(error, 'Could not create the search id'));
        create.disabled = false;
      }
    });
    root.append(h('p', {}, 'Searches need a live search id of this feed.'), create, status);
    return root;
  }
  const host = location.hostname;
  if (
    feedDomains.length > 0 &&
    !feedDomains.some((d) => d === host || (d.startsWith('*.') && host.endsWith(d.slice(1))))
  ) {
    root.append(
      h(
        'div',
        { class: 'alert warn', role: 'note' },
        h(
          'p',
          {},
          `This feed only accepts requests from ${feedDomains.join(', ')}. The dashboard runs at ${host}, so searches from here are refused with 403 domain_not_allowed. Add ${host} under Domains to test here.`,
        ),
      ),
    );
  }
  const keySelect = h(
    'select',
    { id: 'try-key' },
    live.map((key) =>
      h(
        'option',
        { value: key.searchId },
        `${key.name} (${key.searchId.slice(0, 8)}…${key.searchId.slice(-4)})`,
      ),
    ),
  );
  // Out of the Tab order: the drop zone (its label) is the one stop, and opens the picker from the keyboard.
  const fileInput = h('input', {
    type: 'file',
    id: 'try-file',
    accept: 'image/*',
    class: 'visually-hidden',
    tabindex: '-1',
  });
  const drop = h(
    'label',
    { for: 'try-file', class: 'dropzone', tabindex: '0' },
    h('span', { class: 'drop-title' }, 'Choose an image or drop it here'),
    h(
      'span',
      { class: 'muted' },
      'JPEG, PNG, WebP or GIF; it is scaled to at most 1280 px before it is sent.',
    ),
  );
  const stage = h('div', { class: 'stage', 'aria-live': 'polite' });
  const detectArea = h('div', { class: 'detect-status' });
  const resultsHeading = h('h3', { id: 'results-h', tabindex: '-1' }, 'Results');
  const results = h('div', { class: 'results', 'aria-labelledby': 'results-h' });
  const resultsSection = h('section', { class: 'results-section', hidden: true }, resultsHeading, results);
  let prepared: Prepared | undefined;

  drop.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' || event.key === ' ') {
      event.preventDefault();
      fileInput.click();
    }
  });
  drop.addEventListener('dragover', (event) => {
    event.preventDefault();
    drop.classList.add('over');
  });
  drop.addEventListener('dragleave', () => drop.classList.remove('over'));
  drop.addEventListener('drop', (event) => {
    event.preventDefault();
    drop.classList.remove('over');
    const file = event.dataTransfer?.files[0];
    if (file) void start(file);
  });
  fileInput.addEventListener('change', () => {
    const file = fileInput.files?.[0];
    if (file) void start(file);
  });

  // The allowance left, as the last answers said: the search and the detection of one image run at once,
  // so the lower of their counts is the one that is true after both (the search's alone was one too high).
  const quota = h('p', { class: 'meta quota' });
  let lowest: RateLimit | undefined;
  const noteQuota = (rateLimit: RateLimit | undefined, fresh = false) => {
    if (fresh) lowest = undefined;
    if (rateLimit && (!lowest || rateLimit.remaining < lowest.remaining)) lowest = rateLimit;
    quota.textContent = lowest ? `${lowest.remaining} of ${lowest.limit} requests left now` : '';
  };

  async function runSearch(imageData: string, label: string) {
    resultsSection.hidden = false;
    resultsHeading.textContent = `Results for ${label}`;
    replace(results, h('p', { class: 'muted' }, 'Searching…'));
    try {
      const { body, rateLimit } = await search<Product[]>('/search/image', keySelect.value, {
        imageData,
        limit: 24,
        offset: 0,
      });
      noteQuota(rateLimit);
      if (body.length === 0) {
        replace(
          results,
          h(
            'p',
            { class: 'alert info', 'data-empty': 'true' },
            // (Also what a feed with products answers for a photo of nothing it sells: results under the
            // minimum score are dropped, so the message cannot say the feed is empty.)
            'No matching products: nothing in this feed scored high enough for this photo. A feed without ' +
              'products matches nothing: import a product feed under Imports.',
          ),
          quota,
        );
      } else {
        replace(
          results,
          h('ul', { class: 'grid products', 'data-count': body.length }, body.map(productCard)),
          quota,
        );
      }
    } catch (error) {
      replace(
        results,
        error instanceof ApiError && error.status === 503
          ? unavailableBox('Image search', error)
          : errorBox(error, 'Image search failed'),
      );
    }
  }

  async function runDetect(current: Prepared, overlay: HTMLElement) {
    replace(detectArea, h('p', { class: 'muted' }, 'Detecting objects…'));
    try {
      const { body, rateLimit } = await search<DetectResponse>('/detect', keySelect.value, {
        imageData: current.dataUrl,
      });
      noteQuota(rateLimit);
      const objects = body.results.objects;
      replace(
        detectArea,
        h(
          'p',
          { 'data-objects': objects.length },
          objects.length === 0
            ? 'No objects detected.'
            : `${objects.length} object${objects.length === 1 ? '' : 's'} detected — choose a box to search that region.`,
          ` (${body.processTimeSeconds.toFixed(2)} s)`,
        ),
      );
      // A smaller box is drawn above a larger one around it, so a mouse reaches both (the keyboard
      // follows the API's order, best score first).
      const area = ([x1, y1, x2, y2]: DetectedObject['box']) => (x2 - x1) * (y2 - y1);
      const bySize = [...objects].sort((a, b) => area(b.box) - area(a.box));
      objects.forEach((object, i) => {
        const [x1, y1, x2, y2] = object.box;
        const name = `the ${object.label} (${Math.round(object.score * 100)}%)`;
        const box = h(
          'button',
          {
            type: 'button',
            class: 'box',
            'aria-label': `Search ${name}`,
            style: `left:${(x1 / current.canvas.width) * 100}%;top:${(y1 / current.canvas.height) * 100}%;width:${((x2 - x1) / current.canvas.width) * 100}%;height:${((y2 - y1) / current.canvas.height) * 100}%;z-index:${bySize.indexOf(object) + 1}`,
            'data-index': i,
          },
          h('span', { class: 'box-label' }, `${object.label} ${Math.round(object.score * 100)}%`),
        );
        box.addEventListener('click', () => {
          overlay.querySelectorAll('.box').forEach((b) => b.classList.remove('selected'));
          box.classList.add('selected');
          noteQuota(undefined, true);
          void runSearch(crop(current.canvas, object.box), `${name} crop`);
        });
        overlay.append(box);
      });
      placeLabels(overlay);
      // Again whenever the image's displayed size changes: the labels' size does not scale with it.
      new ResizeObserver(() => placeLabels(overlay)).observe(overlay);
    } catch (error) {
      replace(
        detectArea,
        error instanceof ApiError && error.notAvailable
          ? unavailableBox('Object detection', error)
          : errorBox(error, 'Object detection failed'),
      );
    }
  }

  async function start(file: Blob) {
    resultsSection.hidden = true;
    // (A new image: its two answers are compared with each other, not with an older one's.)
    noteQuota(undefined, true);
    try {
      prepared = await prepare(file);
    } catch (error) {
      replace(stage, errorBox(error));
      return;
    }
    const current = prepared;
    // Its own stacking context: the boxes' z-index (smaller above larger) stays below the toast.
    const overlay = h('div', { class: 'overlay', style: 'isolation:isolate' });
    const figure = h(
      'figure',
      { class: 'preview' },
      h(
        'div',
        { class: 'frame' },
        h('img', { src: current.dataUrl, alt: 'The image being searched' }),
        overlay,
      ),
    );
    const whole = h(
      'button',
      {
        type: 'button',
        onclick: () => {
          noteQuota(undefined, true);
          void runSearch(current.dataUrl, 'the whole image');
        },
      },
      'Search the whole image',
    );
    replace(stage, figure, h('div', { class: 'actions' }, whole), detectArea);
    await Promise.all([runSearch(current.dataUrl, 'the whole image'), runDetect(current, overlay)]);
  }

  root.append(
    h('div', { class: 'field' }, h('label', { for: 'try-key' }, 'Search id'), keySelect),
    fileInput,
    drop,
    stage,
    resultsSection,
  );
  return root;
}
