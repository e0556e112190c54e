/* The tp cut of a layer's parameters: a rank's piece of a whole tensor, cut as the
 * layer table's statement of the kind's tensors says (LayerSplit, plan/layer.h). */
#include "rt_private.h"

#include <string.h>

/* Walks the split axis segment by segment: piece t of segment k starts t * len into it
 * in the whole, and after the pieces of the segments before it in the rank's shard. */
static void split_walk(const LayerTensor *piece, const LayerSplit *sp, int tp, int t, float *whole,
                       float *out, int put)
{
	if (sp->axis == LAYER_SPLIT_NONE || tp <= 1) {
		if (put)
			memcpy(whole, out, (size_t)(piece->rows * piece->cols) * sizeof(float));
		else
			memcpy(out, whole, (size_t)(piece->rows * piece->cols) * sizeof(float));
		return;
	}
	int64_t wcols = sp->axis == LAYER_SPLIT_COLS ? 0 : piece->cols;
	for (int k = 0; k < sp->nseg && sp->axis == LAYER_SPLIT_COLS; k++)
		wcols += sp->seg[k];
	int64_t at = 0, from = 0; // along the axis: in the piece, in the whole
	for (int k = 0; k < sp->nseg; k++) {
		int64_t len = sp->seg[k] / tp, src = from + (int64_t)t * len;
		for (int64_t i = 0; i < len; i++)
			if (sp->axis == LAYER_SPLIT_ROWS && put)
				memcpy(whole + (src + i) * wcols, out + (at + i) * piece->cols,
				       (size_t)piece->cols * sizeof(float));
			else if (sp->axis == LAYER_SPLIT_ROWS)
				memcpy(out + (at + i) * piece->cols, whole + (src + i) * wcols,
				       (size_t)piece->cols * sizeof(float));
			else
				for (int64_t r = 0; r < piece->rows; r++) {
					float *w = &whole[r * wcols + src + i], *o = &out[r * piece->cols + at + i];
					if (put)
						*w = *o;
					else
						*o = *w;
				}
		at += len;
		from += sp->seg[k];
	}
}

void rt_split_copy(const LayerTensor *piece, const LayerSplit *sp, int tp, int t, const float *whole,
                   float *out)
{
	split_walk(piece, sp, tp, t, (float *)whole, out, 0);
}

void rt_split_put(const LayerTensor *piece, const LayerSplit *sp, int tp, int t, const float *in,
                  float *whole)
{
	split_walk(piece, sp, tp, t, whole, (float *)in, 1);
}
