// Command pngcheck tells whether a screenshot shows a rendered chart, for
// scripts/html-check.sh: it decodes a PNG (image/png, no other library),
// counts its distinct colors, and counts the pixels close to each color
// asked for (the chart's line colors). It exits 1, saying why, when the
// image is blank (fewer distinct colors than -min-colors) or a color has
// fewer than -min-pixels pixels, so a page whose SVG did not render, or
// rendered without its lines, fails the check.
//
//	go run ./report/internal/pngcheck -colors '#000000,#0072B2,#D55E00' shot.png
package main

import (
	"flag"
	"fmt"
	"image/color"
	"image/png"
	"os"
	"strconv"
	"strings"
)

func main() {
	colors := flag.String("colors", "", "comma-separated #RRGGBB colors that must appear")
	minPixels := flag.Int("min-pixels", 200, "pixels each color needs")
	minColors := flag.Int("min-colors", 8, "distinct colors the image needs")
	tol := flag.Int("tolerance", 24, "largest per-channel difference that still counts as the color")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: pngcheck [flags] FILE.png")
		os.Exit(2)
	}
	if err := check(flag.Arg(0), *colors, *minPixels, *minColors, *tol); err != nil {
		fmt.Fprintln(os.Stderr, "pngcheck:", err)
		os.Exit(1)
	}
}

func check(file, colorList string, minPixels, minColors, tol int) error {
	want, err := parseColors(colorList)
	if err != nil {
		return err
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	b := img.Bounds()
	distinct := map[color.RGBA]bool{}
	hits := make([]int, len(want))
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
			distinct[c] = true
			for i, w := range want {
				if near(c, w, tol) {
					hits[i]++
				}
			}
		}
	}
	fmt.Printf("%s: %d×%d, %d distinct colors\n", file, b.Dx(), b.Dy(), len(distinct))
	var bad []string
	if len(distinct) < minColors {
		bad = append(bad, fmt.Sprintf("%d distinct colors, want at least %d (blank?)", len(distinct), minColors))
	}
	for i, w := range want {
		fmt.Printf("  #%02X%02X%02X: %d pixels\n", w.R, w.G, w.B, hits[i])
		if hits[i] < minPixels {
			bad = append(bad, fmt.Sprintf("#%02X%02X%02X has %d pixels, want at least %d", w.R, w.G, w.B, hits[i], minPixels))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%s: %s", file, strings.Join(bad, "; "))
	}
	return nil
}

func near(a, b color.RGBA, tol int) bool {
	d := func(x, y uint8) int { return max(int(x)-int(y), int(y)-int(x)) }
	return d(a.R, b.R) <= tol && d(a.G, b.G) <= tol && d(a.B, b.B) <= tol
}

func parseColors(s string) ([]color.RGBA, error) {
	var out []color.RGBA
	for _, c := range strings.Split(s, ",") {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		v, err := strconv.ParseUint(strings.TrimPrefix(c, "#"), 16, 32)
		if err != nil || len(strings.TrimPrefix(c, "#")) != 6 {
			return nil, fmt.Errorf("bad color %q (want #RRGGBB)", c)
		}
		out = append(out, color.RGBA{uint8(v >> 16), uint8(v >> 8), uint8(v), 0xff})
	}
	return out, nil
}
