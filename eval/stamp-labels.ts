/**
 * COCO class of a Tux Paint stamp, from the words of its path (`animals/mammals/dog.png` → dog), for the
 * detector score on composites. Only unambiguous words are mapped; everything else has no COCO class.
 */
const WORD_TO_COCO: Record<string, string> = {
  bird: 'bird',
  birds: 'bird',
  dog: 'dog',
  puppy: 'dog',
  cat: 'cat',
  kitten: 'cat',
  horse: 'horse',
  pony: 'horse',
  sheep: 'sheep',
  lamb: 'sheep',
  cow: 'cow',
  bull: 'cow',
  calf: 'cow',
  elephant: 'elephant',
  zebra: 'zebra',
  giraffe: 'giraffe',
  apple: 'apple',
  banana: 'banana',
  orange: 'orange',
  mandarine: 'orange',
  broccoli: 'broccoli',
  carrot: 'carrot',
  pizza: 'pizza',
  donut: 'donut',
  doughnut: 'donut',
  cake: 'cake',
  sandwich: 'sandwich',
  hotdog: 'hot dog',
  cup: 'cup',
  mug: 'cup',
  bottle: 'bottle',
  bowl: 'bowl',
  fork: 'fork',
  knife: 'knife',
  spoon: 'spoon',
  chair: 'chair',
  couch: 'couch',
  sofa: 'couch',
  bed: 'bed',
  clock: 'clock',
  vase: 'vase',
  scissors: 'scissors',
  teddy: 'teddy bear',
  umbrella: 'umbrella',
  backpack: 'backpack',
  suitcase: 'suitcase',
  skateboard: 'skateboard',
  surfboard: 'surfboard',
  kite: 'kite',
  laptop: 'laptop',
  keyboard: 'keyboard',
  book: 'book',
  toothbrush: 'toothbrush',
  toaster: 'toaster',
  microwave: 'microwave',
  refrigerator: 'refrigerator',
  fridge: 'refrigerator',
  bicycle: 'bicycle',
  bike: 'bicycle',
  car: 'car',
  motorcycle: 'motorcycle',
  airplane: 'airplane',
  aeroplane: 'airplane',
  plane: 'airplane',
  bus: 'bus',
  train: 'train',
  locomotive: 'train',
  truck: 'truck',
  boat: 'boat',
  ship: 'boat',
  sailboat: 'boat',
  hydrant: 'fire hydrant',
  bench: 'bench',
  football: 'sports ball',
  basketball: 'sports ball',
  baseball: 'sports ball',
  soccer: 'sports ball',
  tennisball: 'sports ball',
};

export function cocoLabelOfStamp(stampPath: string): string | undefined {
  const words = stampPath
    .toLowerCase()
    .replace(/\.png$/, '')
    .split(/[^a-z]+/)
    .filter(Boolean);
  // The file name is more specific than its folders: search it first.
  for (const word of [...words].reverse()) {
    const label = WORD_TO_COCO[word];
    if (label) return label;
  }
  return undefined;
}
