module github.com/streamalloc/streamalloc

go 1.26
