package zoo

import "flag"

// SmallFlags registers the size flags of a zoo model on fs (-h, -w,
// -classes, -layers, -seq, -hidden, -heads, -ff, -seed), with the small
// defaults the scheduler tools use (32x32 images, 10 classes, a 4-layer
// encoder of hidden size 128), and returns the Options they fill once fs
// is parsed.
func SmallFlags(fs *flag.FlagSet) *Options {
	o := &Options{}
	fs.IntVar(&o.Height, "h", 32, "image height (CNNs)")
	fs.IntVar(&o.Width, "w", 32, "image width (CNNs)")
	fs.IntVar(&o.Classes, "classes", 10, "classifier width (CNNs)")
	fs.IntVar(&o.Layers, "layers", 4, "encoder layers (bert)")
	fs.IntVar(&o.SeqLen, "seq", 32, "sequence length (bert)")
	fs.IntVar(&o.Hidden, "hidden", 128, "hidden size (bert)")
	fs.IntVar(&o.Heads, "heads", 4, "attention heads (bert)")
	fs.IntVar(&o.FF, "ff", 512, "feed-forward size (bert)")
	fs.Uint64Var(&o.Seed, "seed", 1, "weight seed")
	return o
}
